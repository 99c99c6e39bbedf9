package debeziumtest

import "testing"

// The escapes java.util.Properties.load undoes (its javadoc): a value
// written here reads back as given, so a path or password with any
// character reaches the worker intact.
func TestEscapeProp(t *testing.T) {
	for _, c := range []struct {
		in   string
		key  bool
		want string
	}{
		{`/tmp/a b/offsets.dat`, false, `/tmp/a b/offsets.dat`},
		{`C:\dir`, false, `C:\\dir`},
		{"line1\nline2", false, `line1\nline2`},
		{" lead", false, `\ lead`},
		{"#not a comment", false, `\#not a comment`},
		{"a=b:c", true, `a\=b\:c`},
		{"a=b:c", false, `a=b:c`},
		{"Ünal", false, `\u00dcnal`},
		{"😀", false, `\ud83d\ude00`},
	} {
		if got := escapeProp(c.in, c.key); got != c.want {
			t.Errorf("escapeProp(%q, key=%v) = %s, want %s", c.in, c.key, got, c.want)
		}
	}
}
