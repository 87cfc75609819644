package nagare

import (
	"context"
	"log/slog"
	"runtime"
	"time"
)

// SlogOptions configures NewSlogHandler.
type SlogOptions struct {
	// Level is the minimum level recorded. Default slog.LevelInfo.
	Level slog.Leveler
	// AddSource adds a "source" map {"function", "file", "line"}.
	AddSource bool
	// ReplaceAttr is applied to every non-group attribute, as in
	// slog.HandlerOptions.
	ReplaceAttr func(groups []string, a slog.Attr) slog.Attr
}

// SlogHandler is a log/slog.Handler that emits each record as one event:
// {"level": "INFO", "msg": "...", <attributes>}, groups as nested maps,
// with the record's time as the event time.
type SlogHandler struct {
	client *Client
	tag    string
	opts   SlogOptions
	attrs  []groupedAttr
	groups []string
}

type groupedAttr struct {
	groups []string
	attr   slog.Attr
}

// NewSlogHandler returns a slog.Handler that sends records with tag through
// client. Emit errors (buffer full, closed client) are dropped, as a logger
// must not fail the caller; they show in client.Stats().
func NewSlogHandler(client *Client, tag string, opts *SlogOptions) *SlogHandler {
	h := &SlogHandler{client: client, tag: tag}
	if opts != nil {
		h.opts = *opts
	}
	if h.opts.Level == nil {
		h.opts.Level = slog.LevelInfo
	}
	return h
}

// Enabled implements slog.Handler.
func (h *SlogHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.opts.Level.Level()
}

// WithAttrs implements slog.Handler.
func (h *SlogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h2 := *h
	h2.attrs = make([]groupedAttr, len(h.attrs), len(h.attrs)+len(as))
	copy(h2.attrs, h.attrs)
	for _, a := range as {
		h2.attrs = append(h2.attrs, groupedAttr{groups: h.groups, attr: a})
	}
	return &h2
}

// WithGroup implements slog.Handler.
func (h *SlogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.groups = append(append([]string(nil), h.groups...), name)
	return &h2
}

// Handle implements slog.Handler.
func (h *SlogHandler) Handle(_ context.Context, r slog.Record) error {
	rec := make(map[string]any, 4+r.NumAttrs()+len(h.attrs))
	h.put(rec, nil, slog.String(slog.LevelKey, r.Level.String()))
	h.put(rec, nil, slog.String(slog.MessageKey, r.Message))
	if h.opts.AddSource && r.PC != 0 {
		fs := runtime.CallersFrames([]uintptr{r.PC})
		f, _ := fs.Next()
		h.put(rec, nil, slog.Any(slog.SourceKey, map[string]any{
			"function": f.Function, "file": f.File, "line": f.Line,
		}))
	}
	for _, ga := range h.attrs {
		h.put(h.target(rec, ga.groups), ga.groups, ga.attr)
	}
	if r.NumAttrs() > 0 {
		target := h.target(rec, h.groups)
		r.Attrs(func(a slog.Attr) bool {
			h.put(target, h.groups, a)
			return true
		})
	}
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	_ = h.client.EmitWithTime(h.tag, t, rec)
	return nil
}

// target returns the nested map for groups, creating it.
func (h *SlogHandler) target(rec map[string]any, groups []string) map[string]any {
	m := rec
	for _, g := range groups {
		sub, ok := m[g].(map[string]any)
		if !ok {
			sub = map[string]any{}
			m[g] = sub
		}
		m = sub
	}
	return m
}

func (h *SlogHandler) put(m map[string]any, groups []string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Value.Kind() != slog.KindGroup && h.opts.ReplaceAttr != nil {
		a = h.opts.ReplaceAttr(groups, a)
		a.Value = a.Value.Resolve()
	}
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		as := a.Value.Group()
		if len(as) == 0 {
			return
		}
		dst := m
		sub := groups
		if a.Key != "" {
			dst = h.target(m, []string{a.Key})
			sub = append(append([]string(nil), groups...), a.Key)
		}
		for _, ga := range as {
			h.put(dst, sub, ga)
		}
		return
	}
	m[a.Key] = slogValue(a.Value)
}

func slogValue(v slog.Value) any {
	switch v.Kind() {
	case slog.KindString:
		return v.String()
	case slog.KindInt64:
		return v.Int64()
	case slog.KindUint64:
		return v.Uint64()
	case slog.KindFloat64:
		return v.Float64()
	case slog.KindBool:
		return v.Bool()
	case slog.KindDuration:
		return v.Duration().String()
	case slog.KindTime:
		return v.Time().Format(time.RFC3339Nano)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return x.Error()
		case []byte, map[string]any, []any, map[string]string:
			return x
		default:
			if _, err := EncodeRecordValue(x); err == nil {
				return x
			}
			return slog.AnyValue(x).String()
		}
	}
	return v.String()
}

// EncodeRecordValue returns the msgpack encoding of any value as this
// library writes it (sorted map keys, compact integers).
func EncodeRecordValue(v any) ([]byte, error) {
	e := getEncoder()
	defer putEncoder(e)
	if err := e.encode(v); err != nil {
		return nil, err
	}
	return append([]byte(nil), e.buf...), nil
}
