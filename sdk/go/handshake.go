package nagare

import (
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"
)

// Helo is the server's greeting in the forward handshake.
type Helo struct {
	Nonce     []byte
	Auth      []byte
	Keepalive bool
}

// Pong is the server's answer to PING.
type Pong struct {
	AuthOK         bool
	Reason         string
	ServerHostname string
	Digest         string
}

// ErrAuth is returned when the server rejects the handshake or its PONG
// digest does not match the shared key.
var ErrAuth = errors.New("nagare: handshake failed")

func sha512Hex(parts ...[]byte) string {
	h := sha512.New()
	for _, p := range parts {
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// PingDigest is hex(sha512(salt + clientHostname + nonce + sharedKey)).
func PingDigest(salt []byte, hostname string, nonce []byte, sharedKey string) string {
	return sha512Hex(salt, []byte(hostname), nonce, []byte(sharedKey))
}

// PasswordDigest is hex(sha512(authSalt + username + password)).
func PasswordDigest(authSalt []byte, username, password string) string {
	return sha512Hex(authSalt, []byte(username), []byte(password))
}

// EncodePing encodes ["PING", hostname, salt, digest, username, passwordDigest].
// When username is empty the password digest is "" too.
func EncodePing(hostname string, salt []byte, nonce []byte, sharedKey string, authSalt []byte, username, password string) []byte {
	// As Fluentd does: without an auth salt, username and digest are "".
	user, pw := "", ""
	if len(authSalt) > 0 {
		user, pw = username, PasswordDigest(authSalt, username, password)
	}
	var b []byte
	b = append(b, 0x96)
	b = appendStr(b, "PING")
	b = appendStr(b, hostname)
	b = appendStr(b, string(salt))
	b = appendStr(b, PingDigest(salt, hostname, nonce, sharedKey))
	b = appendStr(b, user)
	b = appendStr(b, pw)
	return b
}

// rawBytes accepts str or bin as raw bytes.
func rawBytes(v any) ([]byte, bool) {
	switch x := v.(type) {
	case string:
		return []byte(x), true
	case []byte:
		return x, true
	case nil:
		return nil, true
	}
	return nil, false
}

func readHelo(d *msgpack.Decoder) (*Helo, error) {
	v, err := d.DecodeInterface()
	if err != nil {
		return nil, err
	}
	return parseHelo(v)
}

// DecodeHelo decodes a HELO message.
func DecodeHelo(p []byte) (*Helo, error) {
	var v any
	if err := msgpack.Unmarshal(p, &v); err != nil {
		return nil, err
	}
	return parseHelo(v)
}

func parseHelo(v any) (*Helo, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) < 2 {
		return nil, fmt.Errorf("%w: expected HELO, got %v", ErrAuth, v)
	}
	if s, _ := arr[0].(string); s != "HELO" {
		return nil, fmt.Errorf("%w: expected HELO, got %v", ErrAuth, arr[0])
	}
	opts, ok := arr[1].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: HELO without options", ErrAuth)
	}
	h := &Helo{}
	if h.Nonce, ok = rawBytes(opts["nonce"]); !ok || len(h.Nonce) == 0 {
		return nil, fmt.Errorf("%w: HELO without nonce", ErrAuth)
	}
	if h.Auth, ok = rawBytes(opts["auth"]); !ok {
		return nil, fmt.Errorf("%w: bad HELO auth", ErrAuth)
	}
	h.Keepalive, _ = opts["keepalive"].(bool)
	return h, nil
}

// DecodePong decodes a PONG message.
func DecodePong(p []byte) (*Pong, error) {
	var v any
	if err := msgpack.Unmarshal(p, &v); err != nil {
		return nil, err
	}
	return parsePong(v)
}

func readPong(d *msgpack.Decoder) (*Pong, error) {
	v, err := d.DecodeInterface()
	if err != nil {
		return nil, err
	}
	return parsePong(v)
}

func parsePong(v any) (*Pong, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) != 5 {
		return nil, fmt.Errorf("%w: expected PONG, got %v", ErrAuth, v)
	}
	if s, _ := arr[0].(string); s != "PONG" {
		return nil, fmt.Errorf("%w: expected PONG, got %v", ErrAuth, arr[0])
	}
	p := &Pong{}
	p.AuthOK, _ = arr[1].(bool)
	r, _ := rawBytes(arr[2])
	p.Reason = string(r)
	h, _ := rawBytes(arr[3])
	p.ServerHostname = string(h)
	dg, _ := rawBytes(arr[4])
	p.Digest = string(dg)
	return p, nil
}

// handshake runs HELO/PING/PONG (the caller sets deadlines).
func handshake(w io.Writer, d *msgpack.Decoder, hostname, sharedKey, username, password string, salt []byte) error {
	helo, err := readHelo(d)
	if err != nil {
		return err
	}
	ping := EncodePing(hostname, salt, helo.Nonce, sharedKey, helo.Auth, username, password)
	if _, err := w.Write(ping); err != nil {
		return err
	}
	pong, err := readPong(d)
	if err != nil {
		return err
	}
	if !pong.AuthOK {
		return fmt.Errorf("%w: server refused: %s", ErrAuth, pong.Reason)
	}
	want := PingDigest(salt, pong.ServerHostname, helo.Nonce, sharedKey)
	if pong.Digest != want {
		return fmt.Errorf("%w: PONG digest mismatch (server does not know the shared key)", ErrAuth)
	}
	return nil
}
