obj-y := a.o
# BEGIN sanpolicy generated block: x
KASAN_SANITIZE := n
# END sanpolicy generated block (checksum 1) \
obj-y += swallowed.o
