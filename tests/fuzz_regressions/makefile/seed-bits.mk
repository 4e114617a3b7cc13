# SPDX-License-Identifier: GPL-2.0
#
# Makefile for the linux kernel.
#

extra-y	+= vmlinux.lds

obj-y := head_$(BITS).o
obj-y += head$(BITS).o
obj-y += dumpstack.o dumpstack_$(BITS).o
