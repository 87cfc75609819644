package nagare

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

type vecEntry struct {
	Sec    int64          `json:"sec"`
	Nsec   int64          `json:"nsec"`
	Record map[string]any `json:"record"`
}

type vecFrame struct {
	Name       string         `json:"name"`
	Mode       string         `json:"mode"`
	Tag        string         `json:"tag"`
	Entries    []vecEntry     `json:"entries"`
	Options    map[string]any `json:"options"`
	Hex        string         `json:"hex"`
	EntriesHex string         `json:"entries_hex"`
}

type vecHandshake struct {
	SharedKey      string `json:"shared_key"`
	SaltHex        string `json:"shared_key_salt_hex"`
	ClientHostname string `json:"client_hostname"`
	ServerHostname string `json:"server_hostname"`
	NonceHex       string `json:"nonce_hex"`
	AuthSaltHex    string `json:"auth_salt_hex"`
	Username       string `json:"username"`
	Password       string `json:"password"`
	PingDigest     string `json:"ping_digest"`
	PasswordDigest string `json:"password_digest"`
	PongDigest     string `json:"pong_digest"`
	HeloHex        string `json:"helo_hex"`
	PingHex        string `json:"ping_hex"`
	PongHex        string `json:"pong_hex"`
}

type vectors struct {
	EventTime []struct {
		Sec  int64  `json:"sec"`
		Nsec int64  `json:"nsec"`
		Hex  string `json:"hex"`
	} `json:"event_time"`
	Frames    []vecFrame     `json:"frames"`
	Handshake []vecHandshake `json:"handshake"`
}

func loadVectors(t *testing.T) *vectors {
	t.Helper()
	p := filepath.Join("..", "vectors", "vectors.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v vectors
	if err := d.Decode(&v); err != nil {
		t.Fatalf("parse %s: %v", p, err)
	}
	if len(v.Frames) == 0 || len(v.EventTime) == 0 || len(v.Handshake) == 0 {
		t.Fatalf("%s: empty sections", p)
	}
	// Records were decoded with UseNumber: make them native Go values.
	for i := range v.Frames {
		for j := range v.Frames[i].Entries {
			v.Frames[i].Entries[j].Record = fromJSON(v.Frames[i].Entries[j].Record).(map[string]any)
		}
	}
	return &v
}

// fromJSON turns json.Number into int64/uint64 (integer syntax) or float64.
func fromJSON(v any) any {
	switch x := v.(type) {
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				return n
			}
			if n, err := strconv.ParseUint(s, 10, 64); err == nil {
				return n
			}
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			panic(err)
		}
		return f
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = fromJSON(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = fromJSON(e)
		}
		return out
	}
	return v
}

// canon maps values to a comparable form: every number becomes a string
// (integers exactly, floats in shortest form), []byte becomes string.
func canon(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = canon(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = canon(e)
		}
		return out
	case float64:
		if x == float64(int64(x)) && x < 1e15 && x > -1e15 {
			return "n:" + strconv.FormatInt(int64(x), 10)
		}
		return "n:" + strconv.FormatFloat(x, 'g', -1, 64)
	case float32:
		return canon(float64(x))
	case int8, int16, int32, int64, int, uint8, uint16, uint32, uint64, uint:
		n, _ := new(big.Int).SetString(fmt.Sprint(x), 10)
		return "n:" + n.String()
	case []byte:
		return string(x)
	}
	return v
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func vecOptions(f vecFrame) Options {
	o := Options{}
	if c, ok := f.Options["chunk"].(string); ok {
		o.Chunk = c
	}
	return o
}

func TestVectorsEventTime(t *testing.T) {
	v := loadVectors(t)
	for _, et := range v.EventTime {
		got := hex.EncodeToString(AppendEventTime(nil, time.Unix(et.Sec, et.Nsec)))
		if got != et.Hex {
			t.Errorf("EventTime(%d,%d) = %s, want %s", et.Sec, et.Nsec, got, et.Hex)
		}
	}
}

func TestVectorsFramesEncode(t *testing.T) {
	v := loadVectors(t)
	for _, f := range v.Frames {
		t.Run(f.Name, func(t *testing.T) {
			var entries []byte
			var evs []EventRecord
			for _, e := range f.Entries {
				tm := time.Unix(e.Sec, e.Nsec)
				var err error
				entries, err = AppendEntry(entries, tm, e.Record)
				if err != nil {
					t.Fatal(err)
				}
				evs = append(evs, EventRecord{Time: tm, Record: e.Record})
			}
			if got := hex.EncodeToString(entries); got != f.EntriesHex {
				t.Fatalf("entries:\n got %s\nwant %s", got, f.EntriesHex)
			}
			o := vecOptions(f)
			var frame []byte
			var err error
			switch f.Mode {
			case ModeMessage:
				if len(evs) != 1 {
					t.Fatalf("message vector with %d entries", len(evs))
				}
				frame, err = EncodeMessage(f.Tag, evs[0].Time, evs[0].Record, o)
			case ModeForward:
				frame, err = EncodeForward(f.Tag, evs, o)
			case ModePacked:
				frame = EncodePackedForward(f.Tag, entries, len(evs), o)
			case ModeCompressed:
				frame, err = EncodeCompressedPackedForward(f.Tag, entries, len(evs), o)
			default:
				t.Fatalf("unknown mode %q", f.Mode)
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.Mode == ModeCompressed {
				// gzip bytes differ between libraries: check by decoding.
				checkDecoded(t, f, frame)
				return
			}
			if got := hex.EncodeToString(frame); got != f.Hex {
				t.Fatalf("frame:\n got %s\nwant %s", got, f.Hex)
			}
		})
	}
}

func checkDecoded(t *testing.T, f vecFrame, frame []byte) {
	t.Helper()
	d, err := DecodeFrame(frame)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if d.Mode != f.Mode {
		t.Errorf("mode %q, want %q", d.Mode, f.Mode)
	}
	if d.Tag != f.Tag {
		t.Errorf("tag %q, want %q", d.Tag, f.Tag)
	}
	if got := hex.EncodeToString(d.EntriesBytes); got != f.EntriesHex {
		t.Errorf("entries:\n got %s\nwant %s", got, f.EntriesHex)
	}
	if len(d.Entries) != len(f.Entries) {
		t.Fatalf("%d entries, want %d", len(d.Entries), len(f.Entries))
	}
	for i, e := range f.Entries {
		de := d.Entries[i]
		if de.Time.Unix() != e.Sec || int64(de.Time.Nanosecond()) != e.Nsec {
			t.Errorf("entry %d time %v, want %d.%09d", i, de.Time, e.Sec, e.Nsec)
		}
		if !reflect.DeepEqual(canon(de.Record), canon(e.Record)) {
			t.Errorf("entry %d record %v, want %v", i, de.Record, e.Record)
		}
	}
	want := map[string]any{}
	for k, v := range f.Options {
		want[k] = v
	}
	if f.Mode == ModePacked || f.Mode == ModeCompressed {
		want["size"] = json.Number(strconv.Itoa(len(f.Entries)))
	}
	if f.Mode == ModeCompressed {
		want["compressed"] = "gzip"
	}
	got := d.Options
	if got == nil {
		got = map[string]any{}
	}
	if !reflect.DeepEqual(canon(got), canon(fromJSON(want))) {
		t.Errorf("options %v, want %v", got, want)
	}
}

func TestVectorsFramesDecode(t *testing.T) {
	v := loadVectors(t)
	for _, f := range v.Frames {
		t.Run(f.Name, func(t *testing.T) {
			checkDecoded(t, f, mustHex(t, f.Hex))
		})
	}
}

func TestVectorsHandshake(t *testing.T) {
	v := loadVectors(t)
	for i, h := range v.Handshake {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			salt := mustHex(t, h.SaltHex)
			nonce := mustHex(t, h.NonceHex)
			auth := mustHex(t, h.AuthSaltHex)
			if got := PingDigest(salt, h.ClientHostname, nonce, h.SharedKey); got != h.PingDigest {
				t.Errorf("ping digest %s, want %s", got, h.PingDigest)
			}
			if got := PingDigest(salt, h.ServerHostname, nonce, h.SharedKey); got != h.PongDigest {
				t.Errorf("pong digest %s, want %s", got, h.PongDigest)
			}
			if h.PasswordDigest != "" {
				if got := PasswordDigest(auth, h.Username, h.Password); got != h.PasswordDigest {
					t.Errorf("password digest %s, want %s", got, h.PasswordDigest)
				}
			}
			ping := EncodePing(h.ClientHostname, salt, nonce, h.SharedKey, auth, h.Username, h.Password)
			if got := hex.EncodeToString(ping); got != h.PingHex {
				t.Errorf("ping:\n got %s\nwant %s", got, h.PingHex)
			}
			helo, err := DecodeHelo(mustHex(t, h.HeloHex))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(helo.Nonce, nonce) || !bytes.Equal(helo.Auth, auth) {
				t.Errorf("helo nonce %x auth %x", helo.Nonce, helo.Auth)
			}
			pong, err := DecodePong(mustHex(t, h.PongHex))
			if err != nil {
				t.Fatal(err)
			}
			if !pong.AuthOK || pong.ServerHostname != h.ServerHostname || pong.Digest != h.PongDigest {
				t.Errorf("pong %+v", pong)
			}
		})
	}
}
