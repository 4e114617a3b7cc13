# SPDX-License-Identifier: GPL-2.0
#
# Every shape the reader knows, in one file.
#

obj-y := core.o report.o \
	 shadow.o \
	 init.o
obj-$(CONFIG_X) += x.o

# Paragraph above directives: their reason.
KASAN_SANITIZE_core.o := n
KCSAN_SANITIZE_core.o = n
KCOV_INSTRUMENT := n # inline comment, kept in the value by make
UBSAN_SANITIZE_report.o := n  
export KMSAN_SANITIZE := n
override GCOV_PROFILE_init.o := y
OBJECT_FILES_NON_STANDARD_head$(BITS).o := y
CFLAGS_REMOVE_core.o = $(CC_FLAGS_FTRACE)
CFLAGS_REMOVE_shadow.o = $(CC_FLAGS_FTRACE) -fno-stack-protector
CFLAGS_REMOVE_init.o = -pg
CFLAGS_selftest.o += $(CC_FLAGS_FTRACE)
ccflags-remove-$(CONFIG_FUNCTION_TRACER) += $(CC_FLAGS_FTRACE)
ccflags-remove-y += $(CC_FLAGS_FTRACE)

ifdef CONFIG_FUNCTION_TRACER
ifeq ($(CONFIG_CC_IS_CLANG)$(CONFIG_KASAN),yy)
KASAN_SANITIZE_x.o := n
else ifneq ($(CONFIG_Y),)
KASAN_SANITIZE_x.o := y
else
KCSAN_INSTRUMENT_BARRIERS_x.o := n
endif
endif

ifndef CONFIG_Z
UBSAN_SIGNED_WRAP_y.o := n
endif

define filechk_foo
	KASAN_SANITIZE := n
endef

$(obj)/foo.o: $(src)/foo.S FORCE
	$(call if_changed_rule,as_o_S)

# A continued comment \
  KASAN_SANITIZE_comment.o := n
KMSAN_ENABLE_CHECKS_a.o := n

# BEGIN sanpolicy generated block: do not edit by hand; change the policy and run `sanpolicy gen-makefiles`
# Fixture: a valid block.
KASAN_SANITIZE_lockdep.o := n
ifdef CONFIG_FUNCTION_TRACER
CFLAGS_REMOVE_lockdep.o += $(CC_FLAGS_FTRACE)
endif
# END sanpolicy generated block (checksum 0000000000000000)

# After the block.
obj-y += after.o
