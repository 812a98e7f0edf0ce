// Package auth checks envd's callers against the access token POST /init set: the
// X-Access-Token header, or, for /files, a URL signature made with the token (what the
// SDK's uploadUrl()/downloadUrl() give).
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/url"
	"regexp"
	"strconv"
	"time"
)

// safeEqual compares in constant time (hashing equalises the lengths).
func safeEqual(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1 && len(a) == len(b)
}

// CheckToken: allowed when no token is set, else the header must match. "" = ok, else
// the refusal's message.
func CheckToken(token, header string) string {
	if token == "" {
		return ""
	}
	if header == "" {
		return "unauthorized access, please provide a valid access token"
	}
	if !safeEqual(header, token) {
		return "unauthorized access, invalid access token"
	}
	return ""
}

// fileSignature is what the SDK puts in uploadUrl()/downloadUrl():
// `v1_` + unpadded base64 of sha256("path:op:user:token[:expiration]").
func fileSignature(path, op, user, token string, exp *string) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if exp != nil {
		raw += ":" + *exp
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

var digitsRe = regexp.MustCompile(`^\d+$`)

// CheckFiles: no token → allow; X-Access-Token → must match; else a valid, unexpired
// signature for op ("read" or "write"). "" = ok, else the refusal's message.
func CheckFiles(token, header string, q url.Values, op string) string {
	if token == "" {
		return ""
	}
	if header != "" {
		return CheckToken(token, header)
	}
	sig := q.Get("signature")
	if sig == "" {
		return "unauthorized access, missing access token or signature"
	}
	var exp *string
	if _, ok := q["signature_expiration"]; ok {
		raw := q.Get("signature_expiration")
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || !digitsRe.MatchString(raw) {
			return "invalid signature expiration"
		}
		if n*1000 < time.Now().UnixMilli() {
			return "signature is already expired"
		}
		exp = &raw
	}
	if !safeEqual(sig, fileSignature(q.Get("path"), op, q.Get("username"), token, exp)) {
		return "invalid signature"
	}
	return ""
}
