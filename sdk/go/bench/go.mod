module github.com/nagare-log/nagare/sdk/go/bench

go 1.23.0

require github.com/nagare-log/nagare/sdk/go v0.0.0

require (
	github.com/fluent/fluent-logger-golang v1.10.2
	github.com/philhofer/fwd v1.2.0 // indirect
	github.com/tinylib/msgp v1.3.0 // indirect
	github.com/vmihailenco/msgpack/v5 v5.4.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
)

replace github.com/nagare-log/nagare/sdk/go => ../
