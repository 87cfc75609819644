// Package nagare is a client for nagare and other servers that speak
// Fluentd's forward protocol v1 (Fluentd, Fluent Bit).
//
// Emit encodes an event (nanosecond EventTime and a msgpack map) into a
// per-tag batch in memory and returns; a background goroutine sends batches
// as PackedForward frames over one persistent TCP, TLS or UNIX-socket
// connection, with reconnects (exponential backoff with jitter), failover
// to further servers and back to the primary, an optional shared-key
// handshake, optional acknowledgements (at-least-once) and a disk spill file
// for when memory is full or the process stops before delivery.
//
//	c, err := nagare.New(nagare.Config{Servers: []nagare.Server{{Address: "127.0.0.1:24224"}}})
//	if err != nil { ... }
//	defer c.Close()
//	c.Emit("app.access", map[string]any{"path": "/", "status": 200})
//
// NewSlogHandler plugs the client into log/slog.
package nagare
