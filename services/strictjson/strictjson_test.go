package strictjson_test

import (
	"strings"
	"testing"

	"github.com/notify-dev/notify/services/strictjson"
)

type body struct {
	Title string `json:"title"`
	Inner struct {
		N int `json:"n"`
	} `json:"inner"`
	Data map[string]any `json:"data"`
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		name, in, code string
	}{
		{"plain", `{"title":"x","inner":{"n":1},"data":{"A":1,"a":2}}`, ""},
		{"syntax is the decoder's", `{"title":`, ""},
		{"not UTF-8", "{\"title\":\"\xff\"}", strictjson.CodeInvalidEncoding},
		{"lone surrogate", `{"title":"\ud800"}`, strictjson.CodeInvalidEncoding},
		{"NUL", `{"title":"a\u0000b"}`, strictjson.CodeInvalidEncoding},
		{"repeated name", `{"title":"a","title":"b"}`, strictjson.CodeDuplicateField},
		{"repeated inside", `{"inner":{"n":1,"n":2}}`, strictjson.CodeDuplicateField},
		{"wrong case", `{"TITLE":"x"}`, strictjson.CodeUnknownField},
		{"wrong case inside", `{"inner":{"N":1}}`, strictjson.CodeUnknownField},
		{"too deep", `{"data":` + strings.Repeat(`{"a":`, 20) + `1` + strings.Repeat(`}`, 21), strictjson.CodeMalformedJSON},
	} {
		e := strictjson.Check([]byte(c.in), &body{})
		switch {
		case c.code == "" && e != nil:
			t.Errorf("%s: refused: %v", c.name, e)
		case c.code != "" && (e == nil || e.Code != c.code):
			t.Errorf("%s: %v, want %s", c.name, e, c.code)
		}
	}
}
