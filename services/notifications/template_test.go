package notifications_test

import (
	"testing"

	"github.com/notify-dev/notify/services/notifications"
)

func koEn() notifications.Template {
	return notifications.Template{DefaultLocale: "en", Locales: map[string]notifications.LocaleText{
		"ko": {Title: "{{course.title}}: {{assignment}} 마감", Body: "{{ due }}까지 제출하세요"},
		"en": {Title: "{{course.title}}: {{assignment}} is due", Body: "Hand it in by {{due}}"},
	}}
}

func TestTemplateRender(t *testing.T) {
	r := valid()
	r.Title = nil
	vars := map[string]any{"assignment": "에세이 1", "due": "9월 1일", "course": map[string]any{"title": "국어"}}
	got, err := koEn().Render(vars, r)
	if err != nil {
		t.Fatal(err)
	}
	if got["ko"].Title != "국어: 에세이 1 마감" || got["ko"].Body != "9월 1일까지 제출하세요" || got["en"].Title != "국어: 에세이 1 is due" {
		t.Fatalf("rendered %+v", got)
	}
	// A missing variable refuses the send, naming it; never a hole.
	delete(vars, "due")
	if _, err := koEn().Render(vars, r); code(err) != notifications.CodeMissingVariable || err.(*notifications.Error).Field != "vars.due" {
		t.Fatalf("missing due: %v", err)
	}
	tm := koEn()
	tm.Required = []string{"student.name"}
	vars["due"] = "x"
	if _, err := tm.Render(vars, r); code(err) != notifications.CodeMissingVariable {
		t.Fatalf("missing required: %v", err)
	}
	// Numbers render as JSON numbers.
	one := notifications.Template{DefaultLocale: "en", Locales: map[string]notifications.LocaleText{"en": {Title: "{{n}} new"}}}
	if got, err := one.Render(map[string]any{"n": 3.0}, r); err != nil || got["en"].Title != "3 new" {
		t.Fatalf("number: %+v %v", got, err)
	}
}

func TestTemplateValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*notifications.Template)
		ok   bool
	}{
		{"valid", func(*notifications.Template) {}, true},
		{"default missing", func(t *notifications.Template) { t.DefaultLocale = "fr" }, false},
		{"bad tag", func(t *notifications.Template) { t.Locales["not a tag"] = notifications.LocaleText{Title: "x"} }, false},
		{"same tag twice", func(t *notifications.Template) { t.Locales["KO"] = notifications.LocaleText{Title: "x"} }, false},
		{"no title", func(t *notifications.Template) { t.Locales["de"] = notifications.LocaleText{Body: "x"} }, false},
		{"unclosed", func(t *notifications.Template) { t.Locales["de"] = notifications.LocaleText{Title: "{{x"} }, false},
		{"stray close", func(t *notifications.Template) { t.Locales["de"] = notifications.LocaleText{Title: "x}}"} }, false},
		{"bad name", func(t *notifications.Template) { t.Locales["de"] = notifications.LocaleText{Title: "{{a b}}"} }, false},
		{"region tag", func(t *notifications.Template) { t.Locales["pt-BR"] = notifications.LocaleText{Title: "{{a.b_c}}"} }, true},
	} {
		tm := koEn()
		c.edit(&tm)
		if err := tm.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func TestPickLocale(t *testing.T) {
	l := map[string]notifications.LocaleText{"ko": {}, "en": {}, "pt-BR": {}}
	for _, c := range []struct{ user, want string }{
		{"ko-KR", "ko"}, {"ko", "ko"}, {"KO-kr", "ko"}, {"ko_KR", "ko"}, {"fr", "en"}, {"fr-FR", "en"}, {"", "en"},
		{"pt-BR", "pt-BR"}, {"pt-br", "pt-BR"}, {"pt-PT", "en"},
	} {
		if got := notifications.PickLocale(c.user, l, "en"); got != c.want {
			t.Errorf("%q: %q, want %q", c.user, got, c.want)
		}
	}
}
