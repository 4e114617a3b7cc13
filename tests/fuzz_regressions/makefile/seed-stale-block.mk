# SPDX-License-Identifier: GPL-2.0
obj-y += stackdepot.o

# BEGIN sanpolicy generated block: do not edit by hand; change the policy and run `sanpolicy gen-makefiles`
# stackdepot.c should not be instrumented.
KASAN_SANITIZE_stackdepot.o := n
# END sanpolicy generated block (checksum 6c2a99df2e70f8a3)

# Hand-written, after the block: must survive regeneration.
obj-y += sort.o
