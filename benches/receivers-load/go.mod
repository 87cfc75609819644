module nagare.bench/receivers-load

go 1.21
