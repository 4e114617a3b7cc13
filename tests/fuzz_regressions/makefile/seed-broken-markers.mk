obj-y := a.o
# BEGIN sanpolicy generated block: x
KASAN_SANITIZE := n
# BEGIN sanpolicy generated block: x
# END sanpolicy generated block (checksum 1)
# END sanpolicy generated block (checksum 2)
ifdef A
