obj-y := a.o \
	b.o
KASAN_SANITIZE := n\