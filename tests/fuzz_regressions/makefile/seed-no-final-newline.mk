# SPDX-License-Identifier: GPL-2.0
obj-$(CONFIG_BAR) += bar.o