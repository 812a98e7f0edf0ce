package server

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"aenv/envd/internal/filesystem"
	"aenv/envd/internal/process"
	"aenv/envd/internal/state"
	"aenv/envd/internal/users"
)

func testServer(t *testing.T) *httptest.Server {
	t.Helper()
	etc := t.TempDir()
	if err := os.WriteFile(filepath.Join(etc, "passwd"), []byte("root:x:0:0::/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := state.New("")
	db := users.NewDB(etc)
	res := &users.Resolver{DB: db, Defaults: st.Defaults}
	srv := New(Config{
		State:     st,
		Accounts:  db,
		Files:     filesystem.New(filesystem.Config{Users: res, Token: st.Token}),
		Processes: process.New(process.Config{Users: res, EnvVars: st.EnvVars}),
	})
	ts := httptest.NewUnstartedServer(srv.Handler)
	ts.Config = srv
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

func do(t *testing.T, ts *httptest.Server, method, path, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	if strings.HasPrefix(path, "/filesystem.") {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b := new(strings.Builder)
	buf := make([]byte, 4096)
	for {
		n, err := res.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return res.StatusCode, b.String()
}

// The token POST /init sets guards every route but /health, Connect calls included.
func TestTokenAndRoutes(t *testing.T) {
	ts := testServer(t)
	for _, c := range []struct {
		method, path, token, body string
		status                    int
		answer                    string
	}{
		{"GET", "/health", "", "", 204, ""},
		{"POST", "/health", "", "", 405, `{"code":405,"message":"method not allowed"}`},
		{"GET", "/nope", "", "", 404, `{"code":404,"message":"not found"}`},
		{"POST", "/init", "", `[]`, 400, `{"code":400,"message":"body must be a JSON object"}`},
		{"POST", "/init", "", `{"accessToken":"tok","envVars":{"A":"1"}}`, 204, ""},
		{"GET", "/envs", "", "", 401, `{"code":401,"message":"unauthorized access, please provide a valid access token"}`},
		{"GET", "/envs", "wrong", "", 401, `"message":"unauthorized access, invalid access token"`},
		{"GET", "/envs", "tok", "", 200, `{"A":"1"}`},
		{"GET", "/access/check", "tok", "", 204, ""},
		{"POST", "/quiesce", "", "", 401, `"code":401`},
		{"POST", "/fs-layer/capture", "", "", 401, `"code":401`},
		{"GET", "/fs-layer/capture", "tok", "", 405, `"code":405`},
		{"POST", "/files/compose", "", "{}", 401, `"code":401`},
		{"PUT", "/files", "tok", "", 405, `"code":405`},
		{"POST", "/filesystem.Filesystem/Stat", "", `{"path":"/"}`, 401, `{"code":"unauthenticated","message":"unauthorized access, please provide a valid access token"}`},
		{"POST", "/filesystem.Filesystem/Stat", "tok", `{"path":"/"}`, 200, `"name":"/"`},
		{"POST", "/init", "", `{"accessToken":"other"}`, 401, `"code":401`},
		{"POST", "/init", "tok", `{"accessToken":"other"}`, 204, ""},
		{"GET", "/envs", "other", "", 200, `{"A":"1"}`},
	} {
		status, body := do(t, ts, c.method, c.path, c.token, c.body)
		if status != c.status || !strings.Contains(body, c.answer) {
			t.Errorf("%s %s (token %q): %d %s, want %d %s", c.method, c.path, c.token, status, body, c.status, c.answer)
		}
	}
}

func TestProcNetTCP(t *testing.T) {
	for a, want := range map[string]int{"0100007F:C383": 50051, "00000000:0016": 22, "bad": -1, "0:zz": -1} {
		if got := hexPort(a); got != want {
			t.Errorf("hexPort(%q) = %d, want %d", a, got, want)
		}
	}
	for a, want := range map[string]bool{
		"0100007F:1F90":                         true,  // 127.0.0.1
		"0101007F:1F90":                         true,  // 127.1.1.1
		"1500FEA9:1F90":                         false, // 169.254.0.21
		"00000000000000000000000001000000:0016": true,  // ::1
		"0000000000000000FFFF00000100007F:0016": true,  // ::ffff:127.0.0.1
		"0000000000000000FFFF00001500FEA9:0016": false, // ::ffff:169.254.0.21
		"B80D0120000000000000000001000000:0016": false,
	} {
		if got := hexLoopback(a); got != want {
			t.Errorf("hexLoopback(%q) = %v, want %v", a, got, want)
		}
	}
}
