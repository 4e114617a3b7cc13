# SPDX-License-Identifier: GPL-2.0

obj-y += mutex.o semaphore.o
obj-$(CONFIG_LOCKDEP) += lockdep.o

# BEGIN sanpolicy generated block: do not edit by hand; change the policy and run `sanpolicy gen-makefiles`
# Any varying coverage in these files is non-deterministic.
KCOV_INSTRUMENT := n

# Avoid recursion lockdep -> sanitizer -> ... -> lockdep.
KASAN_SANITIZE_lockdep.o := n
KCSAN_SANITIZE_lockdep.o := n
KMSAN_SANITIZE_lockdep.o := n
# END sanpolicy generated block (checksum 406c8ad0afb30181)
