package filesystem

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"aenv/envd/internal/respond"
)

func TestNegotiateEncoding(t *testing.T) {
	cases := map[string]string{
		"":                           encodingIdentity,
		"gzip":                       encodingGzip,
		"GZip":                       encodingGzip,
		"gzip, deflate":              encodingGzip,
		"gzip, deflate, br, zstd":    encodingGzip,
		"br":                         encodingIdentity,
		"deflate, gzip;q=0.5":        encodingGzip,
		"identity, gzip":             encodingIdentity,
		"gzip;q=0.2, identity;q=0.8": encodingIdentity,
		"gzip;q=0":                   encodingIdentity,
		"identity;q=0":               "",
		"br, identity;q=0":           "",
		"gzip, identity;q=0":         encodingGzip,
		"*":                          encodingIdentity,
		"*;q=0":                      "",
		"*;q=0, identity":            encodingIdentity,
		"br, *;q=0.1, identity;q=0":  encodingGzip,
		"gzip;q=bogus":               encodingGzip,
		" , ,":                       encodingIdentity,
	}
	for header, want := range cases {
		if got := negotiateEncoding(header); got != want {
			t.Errorf("Accept-Encoding %q: got %q, want %q", header, got, want)
		}
	}
}

func TestDownloadEncoding(t *testing.T) {
	s, _, home := testService(t, "")
	text := strings.Repeat("compressible ", 1000)
	if err := os.WriteFile(filepath.Join(home, "t"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	get := func(accept string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/files?path=t", nil)
		if accept != "" {
			r.Header.Set("Accept-Encoding", accept)
		}
		if err := s.Download(w, r); err != nil {
			t.Fatalf("Accept-Encoding %q: %v", accept, err)
		}
		return w
	}
	w := get("gzip, deflate")
	if w.Header().Get("Content-Encoding") != "gzip" || w.Header().Get("Content-Length") != "" || w.Header().Get("Vary") != "Accept-Encoding" {
		t.Fatalf("gzip headers: %v", w.Header())
	}
	zr, err := gzip.NewReader(w.Body)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(zr); err != nil || string(b) != text {
		t.Fatalf("gzip body: %q %v", b, err)
	}
	w = get("")
	if w.Header().Get("Content-Encoding") != "" || w.Header().Get("Content-Length") != "13000" || w.Body.String() != text {
		t.Fatalf("identity: %v %q", w.Header(), w.Body.String())
	}
	r := httptest.NewRequest("GET", "/files?path=f", nil)
	r.Header.Set("Accept-Encoding", "br, identity;q=0")
	err = s.Download(httptest.NewRecorder(), r)
	if e, ok := err.(*respond.Error); !ok || e.Status != 406 || e.Message != "no acceptable encoding found, supported: [identity, gzip]" {
		t.Fatalf("refused identity: %v", err)
	}
}

func TestIncompressibleSentAsIs(t *testing.T) {
	s, _, home := testService(t, "")
	random := make([]byte, 200<<10)
	rand.Read(random)
	if err := os.WriteFile(filepath.Join(home, "r"), random, 0o644); err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/files?path=r", nil)
	r.Header.Set("Accept-Encoding", "gzip")
	if err := s.Download(w, r); err != nil {
		t.Fatal(err)
	}
	if w.Header().Get("Content-Encoding") != "" || w.Header().Get("Content-Length") != "204800" || !bytes.Equal(w.Body.Bytes(), random) {
		t.Fatalf("random bytes: %v", w.Header())
	}
}
