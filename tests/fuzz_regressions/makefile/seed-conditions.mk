# SPDX-License-Identifier: GPL-2.0-only
obj-y += alternative.o cpufeature.o
