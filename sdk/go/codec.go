package nagare

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Frame modes of forward protocol v1.
const (
	ModeMessage    = "message"
	ModeForward    = "forward"
	ModePacked     = "packed"
	ModeCompressed = "compressed"
)

// ErrNotMap is returned when a record does not encode as a msgpack map.
var ErrNotMap = errors.New("nagare: record must encode as a msgpack map")

// Options is the option map of a forward frame. Size is written when
// non-zero or when the mode requires it; Chunk when not empty; Compressed
// when not empty. Keys are always written in the order size, chunk,
// compressed.
type Options struct {
	Size       int
	Chunk      string
	Compressed string
}

// Entry is one decoded event of a frame.
type Entry struct {
	Time   time.Time
	Record map[string]any
}

// Frame is a decoded forward frame.
type Frame struct {
	Mode    string
	Tag     string
	Entries []Entry
	// EntriesBytes holds the concatenated msgpack [time, record] entries
	// (uncompressed) for packed and compressed frames, and the re-encoded
	// entries for message and forward frames.
	EntriesBytes []byte
	// Options is nil when the frame has no option map.
	Options map[string]any
}

// AppendEventTime appends t as a forward EventTime (msgpack ext type 0,
// fixext8: seconds and nanoseconds as big-endian uint32).
func AppendEventTime(b []byte, t time.Time) []byte {
	return appendEventTime(b, uint32(t.Unix()), uint32(t.Nanosecond()))
}

func appendEventTime(b []byte, sec, nsec uint32) []byte {
	b = append(b, 0xd7, 0x00)
	b = binary.BigEndian.AppendUint32(b, sec)
	return binary.BigEndian.AppendUint32(b, nsec)
}

// encoder appends msgpack to a byte slice. Maps are written with their keys
// sorted, integers in their smallest form, strings as str. Values of types
// it does not know go through vmihailenco/msgpack (structs, time.Time,
// custom marshalers...).
type encoder struct {
	buf  []byte
	lib  *msgpack.Encoder
	keys []string
}

type appendWriter struct{ e *encoder }

func (w appendWriter) Write(p []byte) (int, error) {
	w.e.buf = append(w.e.buf, p...)
	return len(p), nil
}

func (w appendWriter) WriteByte(c byte) error {
	w.e.buf = append(w.e.buf, c)
	return nil
}

func (w appendWriter) WriteString(s string) (int, error) {
	w.e.buf = append(w.e.buf, s...)
	return len(s), nil
}

func newEncoder() *encoder {
	e := &encoder{}
	e.lib = msgpack.NewEncoder(appendWriter{e})
	e.lib.SetSortMapKeys(true)
	e.lib.UseCompactInts(true)
	e.lib.SetCustomStructTag("msgpack")
	return e
}

var encoderPool = sync.Pool{New: func() any { return newEncoder() }}

func getEncoder() *encoder {
	e := encoderPool.Get().(*encoder)
	e.buf = e.buf[:0]
	return e
}

func putEncoder(e *encoder) {
	if cap(e.buf) > 1<<16 {
		e.buf = nil
	}
	encoderPool.Put(e)
}

func (e *encoder) appendMapLen(n int) {
	switch {
	case n < 16:
		e.buf = append(e.buf, 0x80|byte(n))
	case n <= math.MaxUint16:
		e.buf = append(e.buf, 0xde, byte(n>>8), byte(n))
	default:
		e.buf = append(e.buf, 0xdf)
		e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(n))
	}
}

func (e *encoder) appendArrayLen(n int) {
	switch {
	case n < 16:
		e.buf = append(e.buf, 0x90|byte(n))
	case n <= math.MaxUint16:
		e.buf = append(e.buf, 0xdc, byte(n>>8), byte(n))
	default:
		e.buf = append(e.buf, 0xdd)
		e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(n))
	}
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = append(b, 0xda, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdb)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	return append(b, s...)
}

func appendBinHeader(b []byte, n int) []byte {
	switch {
	case n <= math.MaxUint8:
		return append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		return append(b, 0xc5, byte(n>>8), byte(n))
	default:
		b = append(b, 0xc6)
		return binary.BigEndian.AppendUint32(b, uint32(n))
	}
}

func appendUint(b []byte, n uint64) []byte {
	switch {
	case n <= 0x7f:
		return append(b, byte(n))
	case n <= math.MaxUint8:
		return append(b, 0xcc, byte(n))
	case n <= math.MaxUint16:
		return append(b, 0xcd, byte(n>>8), byte(n))
	case n <= math.MaxUint32:
		b = append(b, 0xce)
		return binary.BigEndian.AppendUint32(b, uint32(n))
	default:
		b = append(b, 0xcf)
		return binary.BigEndian.AppendUint64(b, n)
	}
}

func appendInt(b []byte, n int64) []byte {
	switch {
	case n >= 0:
		return appendUint(b, uint64(n))
	case n >= -32:
		return append(b, byte(n))
	case n >= math.MinInt8:
		return append(b, 0xd0, byte(n))
	case n >= math.MinInt16:
		return append(b, 0xd1, byte(n>>8), byte(n))
	case n >= math.MinInt32:
		b = append(b, 0xd2)
		return binary.BigEndian.AppendUint32(b, uint32(n))
	default:
		b = append(b, 0xd3)
		return binary.BigEndian.AppendUint64(b, uint64(n))
	}
}

// sortKeys sorts keys in ascending byte order.
func (e *encoder) sortKeys(keys []string) {
	if len(keys) <= 12 {
		for i := 1; i < len(keys); i++ {
			for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
				keys[j], keys[j-1] = keys[j-1], keys[j]
			}
		}
		return
	}
	sort.Strings(keys)
}

func (e *encoder) encodeMapAny(m map[string]any) error {
	e.appendMapLen(len(m))
	start := len(e.keys)
	for k := range m {
		e.keys = append(e.keys, k)
	}
	keys := e.keys[start:]
	e.sortKeys(keys)
	for i := range keys {
		k := e.keys[start+i]
		e.buf = appendStr(e.buf, k)
		if err := e.encode(m[k]); err != nil {
			e.keys = e.keys[:start]
			return err
		}
	}
	clear(e.keys[start:])
	e.keys = e.keys[:start]
	return nil
}

func (e *encoder) encodeMapString(m map[string]string) {
	e.appendMapLen(len(m))
	start := len(e.keys)
	for k := range m {
		e.keys = append(e.keys, k)
	}
	keys := e.keys[start:]
	e.sortKeys(keys)
	for _, k := range keys {
		e.buf = appendStr(e.buf, k)
		e.buf = appendStr(e.buf, m[k])
	}
	clear(e.keys[start:])
	e.keys = e.keys[:start]
}

// encode appends v. Common types are written directly; others go through
// the msgpack library (with sorted map keys and compact integers).
func (e *encoder) encode(v any) error {
	switch x := v.(type) {
	case nil:
		e.buf = append(e.buf, 0xc0)
	case string:
		e.buf = appendStr(e.buf, x)
	case bool:
		if x {
			e.buf = append(e.buf, 0xc3)
		} else {
			e.buf = append(e.buf, 0xc2)
		}
	case int:
		e.buf = appendInt(e.buf, int64(x))
	case int64:
		e.buf = appendInt(e.buf, x)
	case int32:
		e.buf = appendInt(e.buf, int64(x))
	case int16:
		e.buf = appendInt(e.buf, int64(x))
	case int8:
		e.buf = appendInt(e.buf, int64(x))
	case uint:
		e.buf = appendUint(e.buf, uint64(x))
	case uint64:
		e.buf = appendUint(e.buf, x)
	case uint32:
		e.buf = appendUint(e.buf, uint64(x))
	case uint16:
		e.buf = appendUint(e.buf, uint64(x))
	case uint8:
		e.buf = appendUint(e.buf, uint64(x))
	case float64:
		e.buf = append(e.buf, 0xcb)
		e.buf = binary.BigEndian.AppendUint64(e.buf, math.Float64bits(x))
	case []byte:
		if x == nil {
			e.buf = append(e.buf, 0xc0)
			return nil
		}
		e.buf = appendBinHeader(e.buf, len(x))
		e.buf = append(e.buf, x...)
	case map[string]any:
		if x == nil {
			e.buf = append(e.buf, 0xc0)
			return nil
		}
		return e.encodeMapAny(x)
	case map[string]string:
		if x == nil {
			e.buf = append(e.buf, 0xc0)
			return nil
		}
		e.encodeMapString(x)
	case []any:
		if x == nil {
			e.buf = append(e.buf, 0xc0)
			return nil
		}
		e.appendArrayLen(len(x))
		for _, it := range x {
			if err := e.encode(it); err != nil {
				return err
			}
		}
	case []string:
		if x == nil {
			e.buf = append(e.buf, 0xc0)
			return nil
		}
		e.appendArrayLen(len(x))
		for _, it := range x {
			e.buf = appendStr(e.buf, it)
		}
	case msgpack.RawMessage:
		e.buf = append(e.buf, x...)
	case error:
		e.buf = appendStr(e.buf, x.Error())
	default:
		rv := reflect.ValueOf(v)
		if rv.Kind() == reflect.Map && rv.Type().Key().Kind() == reflect.String {
			return e.encodeReflectMap(rv)
		}
		return e.lib.Encode(v)
	}
	return nil
}

// encodeReflectMap writes maps with string keys of any value type with their
// keys sorted (the library sorts only a few map types).
func (e *encoder) encodeReflectMap(rv reflect.Value) error {
	if rv.IsNil() {
		e.buf = append(e.buf, 0xc0)
		return nil
	}
	if _, ok := rv.Interface().(msgpack.CustomEncoder); ok {
		return e.lib.Encode(rv.Interface())
	}
	if _, ok := rv.Interface().(msgpack.Marshaler); ok {
		return e.lib.Encode(rv.Interface())
	}
	keys := rv.MapKeys()
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	e.appendMapLen(len(keys))
	for _, k := range keys {
		e.buf = appendStr(e.buf, k.String())
		if err := e.encode(rv.MapIndex(k).Interface()); err != nil {
			return err
		}
	}
	return nil
}

func isMapCode(c byte) bool {
	return c&0xf0 == 0x80 || c == 0xde || c == 0xdf
}

// appendRecord appends record and checks that it is a msgpack map.
func (e *encoder) appendRecord(record any) error {
	start := len(e.buf)
	if err := e.encode(record); err != nil {
		e.buf = e.buf[:start]
		return err
	}
	if len(e.buf) == start || !isMapCode(e.buf[start]) {
		e.buf = e.buf[:start]
		return ErrNotMap
	}
	return nil
}

// AppendEntry appends one msgpack [EventTime, record] entry to b.
func AppendEntry(b []byte, t time.Time, record any) ([]byte, error) {
	e := getEncoder()
	defer putEncoder(e)
	e.buf = append(e.buf, 0x92)
	e.buf = AppendEventTime(e.buf, t)
	if err := e.appendRecord(record); err != nil {
		return b, err
	}
	return append(b, e.buf...), nil
}

// EncodeRecord returns the msgpack encoding of record as this library writes
// it (sorted map keys, compact integers).
func EncodeRecord(record any) ([]byte, error) {
	e := getEncoder()
	defer putEncoder(e)
	if err := e.appendRecord(record); err != nil {
		return nil, err
	}
	return append([]byte(nil), e.buf...), nil
}

func appendOptions(b []byte, o Options, withSize bool) []byte {
	n := 0
	if withSize {
		n++
	}
	if o.Chunk != "" {
		n++
	}
	if o.Compressed != "" {
		n++
	}
	b = append(b, 0x80|byte(n))
	if withSize {
		b = appendStr(b, "size")
		b = appendUint(b, uint64(o.Size))
	}
	if o.Chunk != "" {
		b = appendStr(b, "chunk")
		b = appendStr(b, o.Chunk)
	}
	if o.Compressed != "" {
		b = appendStr(b, "compressed")
		b = appendStr(b, o.Compressed)
	}
	return b
}

func hasOptions(o Options) bool {
	return o.Size != 0 || o.Chunk != "" || o.Compressed != ""
}

// EncodeMessage encodes a Message frame [tag, time, record(, option)].
// The option map is written only when o has a field set.
func EncodeMessage(tag string, t time.Time, record any, o Options) ([]byte, error) {
	e := getEncoder()
	defer putEncoder(e)
	if hasOptions(o) {
		e.buf = append(e.buf, 0x94)
	} else {
		e.buf = append(e.buf, 0x93)
	}
	e.buf = appendStr(e.buf, tag)
	e.buf = AppendEventTime(e.buf, t)
	if err := e.appendRecord(record); err != nil {
		return nil, err
	}
	if hasOptions(o) {
		e.buf = appendOptions(e.buf, o, o.Size != 0)
	}
	return append([]byte(nil), e.buf...), nil
}

// EventRecord is an event for EncodeForward.
type EventRecord struct {
	Time   time.Time
	Record any
}

// EncodeForward encodes a Forward frame [tag, [[time, record]...](, option)].
func EncodeForward(tag string, events []EventRecord, o Options) ([]byte, error) {
	e := getEncoder()
	defer putEncoder(e)
	if hasOptions(o) {
		e.buf = append(e.buf, 0x93)
	} else {
		e.buf = append(e.buf, 0x92)
	}
	e.buf = appendStr(e.buf, tag)
	e.appendArrayLen(len(events))
	for _, ev := range events {
		e.buf = append(e.buf, 0x92)
		e.buf = AppendEventTime(e.buf, ev.Time)
		if err := e.appendRecord(ev.Record); err != nil {
			return nil, err
		}
	}
	if hasOptions(o) {
		e.buf = appendOptions(e.buf, o, o.Size != 0)
	}
	return append([]byte(nil), e.buf...), nil
}

// appendPackedHeader appends the start of a PackedForward frame: the array
// header, the tag and the bin header for n bytes of entries.
func appendPackedHeader(b []byte, tag string, n int) []byte {
	b = append(b, 0x93)
	b = appendStr(b, tag)
	return appendBinHeader(b, n)
}

// EncodePackedForward encodes [tag, bin(entries), {"size": count, ...}].
func EncodePackedForward(tag string, entries []byte, count int, o Options) []byte {
	o.Size = count
	o.Compressed = ""
	b := appendPackedHeader(make([]byte, 0, len(entries)+len(tag)+64), tag, len(entries))
	b = append(b, entries...)
	return appendOptions(b, o, true)
}

// EncodeCompressedPackedForward encodes
// [tag, bin(gzip(entries)), {"size": count, ..., "compressed": "gzip"}].
func EncodeCompressedPackedForward(tag string, entries []byte, count int, o Options) ([]byte, error) {
	z, err := gzipBytes(entries)
	if err != nil {
		return nil, err
	}
	o.Size = count
	o.Compressed = "gzip"
	b := appendPackedHeader(make([]byte, 0, len(z)+len(tag)+64), tag, len(z))
	b = append(b, z...)
	return appendOptions(b, o, true), nil
}

func gzipBytes(p []byte) ([]byte, error) {
	var out bytes.Buffer
	w, err := gzip.NewWriterLevel(&out, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(p); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func gunzipBytes(p []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(p))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// decodeTime reads an EventTime or an integer time.
func decodeTime(d *msgpack.Decoder) (time.Time, error) {
	c, err := d.PeekCode()
	if err != nil {
		return time.Time{}, err
	}
	if c == 0xd7 || c == 0xc7 {
		id, n, err := d.DecodeExtHeader()
		if err != nil {
			return time.Time{}, err
		}
		if id != 0 || n != 8 {
			return time.Time{}, fmt.Errorf("nagare: bad EventTime ext type %d length %d", id, n)
		}
		var p [8]byte
		if err := d.ReadFull(p[:]); err != nil {
			return time.Time{}, err
		}
		sec := binary.BigEndian.Uint32(p[:4])
		nsec := binary.BigEndian.Uint32(p[4:])
		return time.Unix(int64(sec), int64(nsec)).UTC(), nil
	}
	sec, err := d.DecodeInt64()
	if err != nil {
		return time.Time{}, fmt.Errorf("nagare: bad time: %w", err)
	}
	return time.Unix(sec, 0).UTC(), nil
}

func decodeEntry(d *msgpack.Decoder) (Entry, error) {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return Entry{}, err
	}
	if n != 2 {
		return Entry{}, fmt.Errorf("nagare: entry has %d elements, want 2", n)
	}
	t, err := decodeTime(d)
	if err != nil {
		return Entry{}, err
	}
	rec, err := d.DecodeMap()
	if err != nil {
		return Entry{}, err
	}
	return Entry{Time: t, Record: rec}, nil
}

func decodeEntries(p []byte) ([]Entry, error) {
	d := msgpack.NewDecoder(bytes.NewReader(p))
	var out []Entry
	for {
		if _, err := d.PeekCode(); err == io.EOF {
			return out, nil
		}
		e, err := decodeEntry(d)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
}

func reencodeEntries(entries []Entry) ([]byte, error) {
	var b []byte
	var err error
	for _, en := range entries {
		b, err = AppendEntry(b, en.Time, en.Record)
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// DecodeFrame decodes one forward frame of any mode. Compressed entries are
// gunzipped into EntriesBytes.
func DecodeFrame(p []byte) (*Frame, error) {
	d := msgpack.NewDecoder(bytes.NewReader(p))
	f, err := decodeFrame(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.PeekCode(); err != io.EOF {
		return nil, errors.New("nagare: trailing bytes after frame")
	}
	return f, nil
}

func decodeFrame(d *msgpack.Decoder) (*Frame, error) {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return nil, err
	}
	if n < 2 || n > 4 {
		return nil, fmt.Errorf("nagare: frame has %d elements", n)
	}
	tag, err := d.DecodeString()
	if err != nil {
		return nil, fmt.Errorf("nagare: bad tag: %w", err)
	}
	f := &Frame{Tag: tag}
	c, err := d.PeekCode()
	if err != nil {
		return nil, err
	}
	rest := n - 2
	switch {
	case c&0xf0 == 0x90 || c == 0xdc || c == 0xdd: // Forward
		f.Mode = ModeForward
		m, err := d.DecodeArrayLen()
		if err != nil {
			return nil, err
		}
		for i := 0; i < m; i++ {
			en, err := decodeEntry(d)
			if err != nil {
				return nil, err
			}
			f.Entries = append(f.Entries, en)
		}
	case c == 0xc4 || c == 0xc5 || c == 0xc6 || c&0xe0 == 0xa0 || c == 0xd9 || c == 0xda || c == 0xdb:
		f.Mode = ModePacked
		raw, err := d.DecodeBytes()
		if err != nil {
			return nil, err
		}
		f.EntriesBytes = raw
	default: // Message
		f.Mode = ModeMessage
		if n < 3 {
			return nil, errors.New("nagare: message frame without record")
		}
		t, err := decodeTime(d)
		if err != nil {
			return nil, err
		}
		rec, err := d.DecodeMap()
		if err != nil {
			return nil, err
		}
		f.Entries = []Entry{{Time: t, Record: rec}}
		rest = n - 3
	}
	if rest > 1 {
		return nil, errors.New("nagare: too many frame elements")
	}
	if rest == 1 {
		opt, err := d.DecodeMap()
		if err != nil {
			return nil, fmt.Errorf("nagare: bad option: %w", err)
		}
		f.Options = opt
	}
	if f.Mode == ModePacked {
		if comp, _ := f.Options["compressed"].(string); comp != "" {
			if comp != "gzip" {
				return nil, fmt.Errorf("nagare: unknown compression %q", comp)
			}
			f.Mode = ModeCompressed
			f.EntriesBytes, err = gunzipBytes(f.EntriesBytes)
			if err != nil {
				return nil, err
			}
		}
		f.Entries, err = decodeEntries(f.EntriesBytes)
		if err != nil {
			return nil, err
		}
	} else {
		f.EntriesBytes, err = reencodeEntries(f.Entries)
		if err != nil {
			return nil, err
		}
	}
	return f, nil
}
