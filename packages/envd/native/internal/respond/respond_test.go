package respond

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestFailBody(t *testing.T) {
	w := httptest.NewRecorder()
	Fail(w, 404, "path '/x' does not exist")
	if w.Code != 404 || w.Header().Get("Content-Type") != "application/json" ||
		w.Body.String() != `{"code":404,"message":"path '/x' does not exist"}` {
		t.Fatalf("%d %q %s", w.Code, w.Header().Get("Content-Type"), w.Body.String())
	}
}

func TestReadBody(t *testing.T) {
	r := httptest.NewRequest("POST", "/", strings.NewReader("12345"))
	if b, err := ReadBody(r, 5); err != nil || string(b) != "12345" {
		t.Fatalf("%q %v", b, err)
	}
	r = httptest.NewRequest("POST", "/", strings.NewReader("123456"))
	if _, err := ReadBody(r, 5); err == nil || err.(*Error).Status != 413 {
		t.Fatalf("over the limit: %v", err)
	}
	if err := MethodIs(httptest.NewRequest("PUT", "/", nil), "GET", "HEAD"); err == nil || err.(*Error).Status != 405 {
		t.Fatalf("PUT: %v", err)
	}
	if err := MethodIs(httptest.NewRequest("HEAD", "/", nil), "GET", "HEAD"); err != nil {
		t.Fatal(err)
	}
}
