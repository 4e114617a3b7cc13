aaAA0a__A aলᢀ⺛𑥐aaAa®a0 a-0_obj
KASAN_SANITIZE := n\