package metadata

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Session tokens (PUT /v1/token).
const (
	// TokenPath is where a workload asks for a session token, with PUT.
	TokenPath = "/v1/token"
	// TokenTTLHeader carries the seconds the token is asked for (and
	// granted, in the answer).
	TokenTTLHeader = "X-Metadata-Token-TTL-Seconds"
	// TokenHeader carries the token on every other request.
	TokenHeader = "X-Metadata-Token"
	// MaxTokenTTL is the longest a token may live.
	MaxTokenTTL = 6 * time.Hour
)

// tokenVersion begins every token, so that the format may change.
const tokenVersion = "v1."

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("metadata: no randomness: " + err.Error()) // crypto/rand does not fail on Linux
	}
	return b
}

// sign is a token's MAC: the instance, its salt and the expiry.
func (s *Endpoints) sign(id string, salt []byte, exp int64) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(id))
	m.Write([]byte{0})
	m.Write(salt)
	var e [8]byte
	binary.BigEndian.PutUint64(e[:], uint64(exp))
	m.Write(e[:])
	return m.Sum(nil)
}

// newToken issues a token of instance id that expires at exp (Unix
// seconds): the expiry and its MAC, base64url.
func (s *Endpoints) newToken(id string, exp int64) string {
	s.mu.Lock()
	salt := s.salts[id]
	if salt == nil {
		salt = randomBytes(16)
		s.salts[id] = salt
	}
	s.mu.Unlock()
	b := binary.BigEndian.AppendUint64(nil, uint64(exp))
	b = append(b, s.sign(id, salt, exp)...)
	return tokenVersion + base64.RawURLEncoding.EncodeToString(b)
}

// validToken says whether tok is a token of instance id that has not
// expired.
func (s *Endpoints) validToken(id, tok string) bool {
	rest, ok := strings.CutPrefix(tok, tokenVersion)
	if !ok || len(rest) > 128 {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || len(b) != 8+sha256.Size {
		return false
	}
	exp := int64(binary.BigEndian.Uint64(b[:8]))
	s.mu.Lock()
	salt, now := s.salts[id], s.now()
	s.mu.Unlock()
	if salt == nil || now.Unix() >= exp {
		return false
	}
	return hmac.Equal(b[8:], s.sign(id, salt, exp))
}

// issueToken answers PUT /v1/token.
func (s *Endpoints) issueToken(w http.ResponseWriter, r *http.Request, id string) {
	if r.Method != http.MethodPut {
		w.Header().Set("Allow", "PUT")
		writeError(w, http.StatusMethodNotAllowed, cloud.Invalid, "use PUT to get a session token")
		return
	}
	if len(r.Header.Values("X-Forwarded-For")) > 0 {
		// A proxy forwarded this request: a token handed out here could
		// end up with whoever is on the proxy's other side.
		writeError(w, http.StatusForbidden, cloud.PermissionDenied, "session tokens are not handed out through a proxy (the request has X-Forwarded-For)")
		return
	}
	ttl, err := strconv.Atoi(strings.TrimSpace(r.Header.Get(TokenTTLHeader)))
	if err != nil || ttl < 1 || ttl > int(MaxTokenTTL/time.Second) {
		writeError(w, http.StatusBadRequest, cloud.Invalid,
			fmt.Sprintf("send the token's lifetime in %s: 1 to %d seconds", TokenTTLHeader, int(MaxTokenTTL/time.Second)))
		return
	}
	tok := s.newToken(id, s.now().Unix()+int64(ttl))
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(TokenTTLHeader, strconv.Itoa(ttl))
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, tok)
}

// Token asks the metadata endpoint at base (GPUCLOUD_METADATA_URL) for a
// session token valid for ttl (whole seconds, at least one), with hc
// (http.DefaultClient when nil). Send it in TokenHeader; ask again after a
// 401.
func Token(ctx context.Context, hc *http.Client, base string, ttl time.Duration) (string, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, strings.TrimSuffix(base, "/")+TokenPath, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set(TokenTTLHeader, strconv.Itoa(max(1, int(ttl/time.Second))))
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("metadata token: %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return string(bytes.TrimSpace(b)), nil
}
