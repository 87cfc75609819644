module nagare.test/lumber

go 1.21

require github.com/elastic/go-lumber v0.1.1

require github.com/klauspost/compress v1.11.2 // indirect
