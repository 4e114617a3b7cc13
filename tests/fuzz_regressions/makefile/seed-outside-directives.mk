# SPDX-License-Identifier: GPL-2.0
#
# Makefile for the linux memory manager.
#

# These files are disabled because they produce lots of non-interesting and/or
# flaky coverage that is not a function of syscall inputs.
KCOV_INSTRUMENT_slub.o := n
KCOV_INSTRUMENT_page_alloc.o := n

obj-y := slub.o page_alloc.o
