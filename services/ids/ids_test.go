package ids

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
)

func TestMap(t *testing.T) {
	ns := uuid.MustParse("6ba7b810-9dad-11d1-80b4-00c04fd430c8") // RFC 9562's DNS namespace
	m := New(ns)
	u := "0b9a1e2c-3d4f-4a5b-8c6d-7e8f9a0b1c2d"
	if got, err := m.Map(strings.ToUpper(u)); err != nil || got.String() != u {
		t.Fatalf("uuid should stay itself: %v %v", got, err)
	}
	// RFC 9562 appendix A.4's vector: UUIDv5 of "www.example.com" in the DNS namespace.
	if got, err := m.Map("www.example.com"); err != nil || got.String() != "2ed6657d-e927-568b-95e1-2665a8aea6a2" {
		t.Fatalf("v5 vector: %v %v", got, err)
	}
	a, _ := m.MapInt(42)
	b, _ := m.Map("42")
	if a != b || a.Version() != 5 {
		t.Fatalf("MapInt(42)=%v Map(\"42\")=%v", a, b)
	}
	for _, bad := range []string{"", strings.Repeat("x", MaxBytes+1), "\xff", "00000000-0000-0000-0000-000000000000"} {
		if _, err := m.Map(bad); !errors.Is(err, ErrUnmapped) {
			t.Errorf("Map(%q) = %v, want ErrUnmapped", bad, err)
		}
	}
	if _, err := m.Map(strings.Repeat("x", MaxBytes)); err != nil {
		t.Errorf("128 bytes should map: %v", err)
	}
}

func TestZeroMapperTakesUUIDsOnly(t *testing.T) {
	var m Mapper
	if _, err := m.Map("0b9a1e2c-3d4f-4a5b-8c6d-7e8f9a0b1c2d"); err != nil {
		t.Fatal(err)
	}
	_, err := m.Map("42")
	if !errors.Is(err, ErrUnmapped) || !strings.Contains(err.Error(), EnvNamespace) {
		t.Fatalf("want an error naming %s, got %v", EnvNamespace, err)
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(EnvNamespace, "not-a-uuid")
	if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), EnvNamespace) {
		t.Fatalf("want an error naming the setting, got %v", err)
	}
	t.Setenv(EnvNamespace, "6ba7b810-9dad-11d1-80b4-00c04fd430c8")
	m, err := FromEnv()
	if _, set := m.Namespace(); err != nil || !set {
		t.Fatalf("FromEnv: %v", err)
	}
}
