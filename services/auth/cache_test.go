package auth

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestCacheAcceptsWhatVerifyAccepts(t *testing.T) {
	ctx := context.Background()
	k := testKey(t)
	c, err := NewCache(k, CacheConfig{Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	tok, err := k.Sign(Claims{Subject: "u1", IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // miss, then hit
		cl, err := c.Verify(ctx, tok, now)
		if err != nil || cl.Subject != "u1" {
			t.Fatalf("verify %d: %+v, %v", i, cl, err)
		}
	}
	if c.Len() != 1 {
		t.Fatalf("cache holds %d tokens, want 1", c.Len())
	}
	// A cached token still expires on time.
	if _, err := c.Verify(ctx, tok, now.Add(time.Hour)); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired cached token: %v, want ErrExpired", err)
	}
	if c.Len() != 0 {
		t.Fatalf("expired token stays cached")
	}
	// A tampered signature is another map key: verified, rejected, not cached.
	if _, err := c.Verify(ctx, tok, now); err != nil {
		t.Fatal(err)
	}
	bad := tok[:len(tok)-2] + "AA"
	if bad == tok {
		bad = tok[:len(tok)-2] + "BB"
	}
	if _, err := c.Verify(ctx, bad, now); !errors.Is(err, ErrSignature) && !errors.Is(err, ErrMalformed) {
		t.Fatalf("tampered token: %v, want a signature error", err)
	}
	if c.Len() != 1 {
		t.Fatalf("cache holds %d tokens after a failure, want 1", c.Len())
	}
}

func TestCacheIsBounded(t *testing.T) {
	ctx := context.Background()
	k := testKey(t)
	c, err := NewCache(k, CacheConfig{Size: 3})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	for i := range 10 {
		tok, err := k.Sign(Claims{Subject: "u", IssuedAt: now.Add(time.Duration(i) * time.Second), ExpiresAt: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Verify(ctx, tok, now); err != nil {
			t.Fatal(err)
		}
		if c.Len() > 3 {
			t.Fatalf("cache grew to %d, bound 3", c.Len())
		}
	}
	if _, err := NewCache(k, CacheConfig{Size: -1}); err == nil {
		t.Fatal("negative size accepted")
	}
}
