module nagare.bench/scale

go 1.21
