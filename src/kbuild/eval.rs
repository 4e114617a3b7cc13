//! A small GNU make evaluator: enough of variable assignment, expansion and conditionals to run a
//! kbuild file's assignments the way make would, so that the resolver can read the values Kbuild's
//! expressions see. Functions other than the few Kbuild uses in names expand to nothing, as an
//! undefined `$(call …)` does in make.

// Variable names come from the tree's Makefiles: foldhash is seeded per process (no chosen-key
// flooding) and, unlike SipHash, cheap on the many short names one run looks up.
use foldhash::HashMap;
use foldhash::HashMapExt;

use crate::makefile::{Condition, Event, KbuildFile, Op};

#[derive(Debug, Clone)]
struct Var {
    value: String,
    recursive: bool,
    /// Set by `override`: later plain assignments and `undefine` leave it alone.
    overridden: bool,
}

/// Variables after running a kbuild file.
#[derive(Debug, Clone, Default)]
pub struct Env {
    vars: HashMap<String, Var>,
    /// Target-specific `is-kernel-object` values by object: (value, 1-based line); later lines win.
    kernel_object: HashMap<String, (String, usize)>,
}

/// Decides each conditional: by evaluating it, or by a chosen truth value (for "every config").
pub trait Oracle {
    fn decide(&mut self, condition: &Condition, env: &Env) -> bool;
}

/// Evaluate conditionals with make's rules against the current variables.
pub struct Evaluate;

impl Oracle for Evaluate {
    fn decide(&mut self, condition: &Condition, env: &Env) -> bool {
        condition.eval(&|t| env.expand(t), &|name| env.vars.get(name).is_some_and(|v| !v.value.is_empty()))
    }
}

impl Env {
    /// An environment with simple (`:=`) variables preset, like values from `auto.conf`.
    pub fn with(preset: impl IntoIterator<Item = (String, String)>) -> Env {
        let vars =
            preset.into_iter().map(|(k, v)| (k, Var { value: v, recursive: false, overridden: false })).collect();
        Env { vars, kernel_object: HashMap::new() }
    }

    pub fn set(&mut self, name: &str, value: &str) {
        self.vars.insert(name.to_string(), Var { value: value.to_string(), recursive: false, overridden: false });
    }

    /// Run every assignment of `file` in order, under the conditionals `oracle` lets through.
    pub fn run(&mut self, file: &KbuildFile, oracle: &mut dyn Oracle) {
        // Each level: (this branch is taken, some branch of this if/else chain was taken).
        let mut stack: Vec<(bool, bool)> = Vec::new();
        let active = |stack: &[(bool, bool)]| stack.iter().all(|(taken, _)| *taken);
        for event in &file.events {
            match event {
                Event::If(c) => {
                    let taken = active(&stack) && oracle.decide(c, self);
                    stack.push((taken, taken));
                }
                Event::Else(chained) => {
                    let Some((_, done)) = stack.pop() else { continue };
                    let outer = active(&stack);
                    let taken = !done && outer && chained.as_ref().is_none_or(|c| oracle.decide(c, self));
                    stack.push((taken, done || taken));
                }
                Event::Endif => {
                    stack.pop();
                }
                Event::Assign(i) if active(&stack) => {
                    let a = &file.assignments[*i];
                    let name = self.expand(&a.name);
                    let overriding = a.modifiers.iter().any(|m| m == "override");
                    if overriding || !self.vars.get(name.trim()).is_some_and(|v| v.overridden) {
                        self.assign(&name, a.op, &a.value);
                        if let Some(v) = self.vars.get_mut(name.trim()) {
                            v.overridden |= overriding;
                        }
                    }
                }
                Event::Undefine(i) if active(&stack) => {
                    let a = &file.assignments[*i];
                    let name = self.expand(&a.name);
                    let overriding = a.modifiers.iter().any(|m| m == "override");
                    if overriding || !self.vars.get(name.trim()).is_some_and(|v| v.overridden) {
                        self.vars.remove(name.trim());
                    }
                }
                Event::Target(i) if active(&stack) => {
                    let t = &file.kernel_object_lines[*i];
                    // Kbuild reads it when compiling; its references are `CONFIG_`s, fixed in a run.
                    let value = self.expand(&t.value);
                    for o in &t.objects {
                        self.kernel_object.insert(o.clone(), (value.clone(), t.line));
                    }
                }
                Event::Assign(_) | Event::Undefine(_) | Event::Target(_) => {}
            }
        }
    }

    /// Apply one assignment as make does.
    pub fn assign(&mut self, name: &str, op: Op, value: &str) {
        let name = name.trim().to_string();
        match op {
            Op::Simple | Op::Immediate => {
                let v = self.expand(value);
                self.vars.insert(name, Var { value: v, recursive: false, overridden: false });
            }
            Op::Recursive => {
                self.vars.insert(name, Var { value: value.to_string(), recursive: true, overridden: false });
            }
            Op::Conditional => {
                self.vars.entry(name).or_insert(Var { value: value.to_string(), recursive: true, overridden: false });
            }
            Op::Append => {
                // In place: `obj-y += x.o` 100,000 times must not copy the growing value each time.
                let text = match self.vars.get(&name) {
                    Some(old) if !old.recursive => self.expand(value),
                    _ => value.to_string(),
                };
                match self.vars.get_mut(&name) {
                    Some(old) => append(&mut old.value, &text),
                    None => {
                        self.vars.insert(name, Var { value: text, recursive: true, overridden: false });
                    }
                }
            }
            Op::Shell => {
                // The shell's output is unknown; the reader lists a directive set this way as opaque.
                self.vars.insert(name, Var { value: String::new(), recursive: false, overridden: false });
            }
        }
    }

    /// The target-specific `is-kernel-object` of `object` (relative to the directory), if a
    /// line run set one: its value and line.
    pub fn kernel_object_of(&self, object: &str) -> Option<(&str, usize)> {
        self.kernel_object.get(object).map(|(v, l)| (v.as_str(), *l))
    }

    /// Every object a target-specific `is-kernel-object` was set for, with its value.
    pub fn kernel_object_targets(&self) -> impl Iterator<Item = (&str, &str)> {
        self.kernel_object.iter().map(|(o, (v, _))| (o.as_str(), v.as_str()))
    }

    /// Whether a run (or a preset) defined the variable.
    pub fn defined(&self, name: &str) -> bool {
        self.vars.contains_key(name)
    }

    /// The expanded value of a variable (empty when undefined).
    pub fn value(&self, name: &str) -> String {
        match self.vars.get(name) {
            Some(v) if v.recursive => self.expand(&v.value),
            Some(v) => v.value.clone(),
            None => String::new(),
        }
    }

    /// Expand `text` with `overlay`'s variables set on top (as the rule's target-specific
    /// values are, simply expanded), leaving this environment as it is.
    pub fn expand_with(&self, text: &str, overlay: &[(String, String)]) -> String {
        Scope { env: self, overlay }.expand_depth(text, 0)
    }

    /// Expand `$(…)`, `${…}` and `$X` references.
    pub fn expand(&self, text: &str) -> String {
        Scope { env: self, overlay: &[] }.expand_depth(text, 0)
    }
}

/// An environment as one expansion sees it: `overlay`'s simple variables over `env`'s. The
/// overlay is looked at first instead of copied in: a flags expression is expanded for every
/// object, and copying a run's variables each time cost more than the expansion.
struct Scope<'a> {
    env: &'a Env,
    overlay: &'a [(String, String)],
}

impl Scope<'_> {
    fn expand_depth(&self, text: &str, depth: usize) -> String {
        if depth > 64 || !text.contains('$') {
            return text.to_string();
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(i) = rest.find('$') {
            out.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            let Some(open) = after.chars().next() else { break };
            if open == '$' {
                out.push('$');
                rest = &after[1..];
                continue;
            }
            if open != '(' && open != '{' {
                out.push_str(&self.value_depth(&open.to_string(), depth));
                rest = &after[open.len_utf8()..];
                continue;
            }
            let close = if open == '(' { ')' } else { '}' };
            let Some(end) = matching(after, open, close) else {
                rest = "";
                break;
            };
            out.push_str(&self.reference(&after[1..end], depth));
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        out
    }

    fn value_depth(&self, name: &str, depth: usize) -> String {
        // The last overlay entry for a name wins, as the last `set` did.
        if let Some((_, value)) = self.overlay.iter().rev().find(|(n, _)| n == name) {
            return value.clone();
        }
        match self.env.vars.get(name) {
            Some(v) if v.recursive => self.expand_depth(&v.value, depth + 1),
            Some(v) => v.value.clone(),
            None => String::new(),
        }
    }

    /// The inside of one `$(…)`: a variable, or a function call.
    fn reference(&self, inner: &str, depth: usize) -> String {
        let (word, args) = match inner.find([' ', '\t']) {
            Some(i) if !inner[..i].contains('$') => (&inner[..i], inner[i + 1..].trim_start()),
            _ => (inner, ""),
        };
        if args.is_empty() && !inner.contains([' ', '\t']) {
            // A substitution reference: `$(var:.o=.c)` is `$(patsubst %.o,%.c,$(var))`.
            if let Some((var, rule)) = inner.split_once(':').filter(|(v, r)| !v.contains('$') && r.contains('=')) {
                let (from, to) = rule.split_once('=').unwrap_or((rule, ""));
                let (from, to) = if from.contains('%') {
                    (from.to_string(), to.to_string())
                } else {
                    (format!("%{from}"), format!("%{to}"))
                };
                let value = self.value_depth(var, depth);
                return value.split_whitespace().map(|w| patsubst(&from, &to, w)).collect::<Vec<_>>().join(" ");
            }
            let name = self.expand_depth(inner, depth + 1);
            return self.value_depth(&name, depth);
        }
        let arg = |s: &str| self.expand_depth(s, depth + 1);
        match word {
            "if" => {
                let parts = split_args(args, 3);
                let cond = arg(parts[0].trim());
                let pick = if !cond.trim().is_empty() { parts.get(1) } else { parts.get(2) };
                pick.map(|p| arg(p)).unwrap_or_default()
            }
            "or" => {
                split_args(args, usize::MAX).iter().map(|p| arg(p)).find(|v| !v.trim().is_empty()).unwrap_or_default()
            }
            "and" => {
                let mut last = String::new();
                for p in split_args(args, usize::MAX) {
                    last = arg(p);
                    if last.trim().is_empty() {
                        return String::new();
                    }
                }
                last
            }
            "patsubst" => {
                let parts = split_args(args, 3);
                let (pat, rep, list) =
                    (arg(parts[0]), arg(parts.get(1).copied().unwrap_or("")), arg(parts.get(2).copied().unwrap_or("")));
                list.split_whitespace()
                    .map(|w| patsubst(&pat, &rep, w))
                    .filter(|w| !w.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ")
            }
            "filter" | "filter-out" => {
                let parts = split_args(args, 2);
                let pats = arg(parts[0]);
                let list = arg(parts.get(1).copied().unwrap_or(""));
                let keep = word == "filter";
                list.split_whitespace()
                    .filter(|w| pats.split_whitespace().any(|p| pattern_match(p, w).is_some()) == keep)
                    .collect::<Vec<_>>()
                    .join(" ")
            }
            "strip" => arg(args).split_whitespace().collect::<Vec<_>>().join(" "),
            "subst" => {
                let parts = split_args(args, 3);
                let (from, to) = (arg(parts[0]), arg(parts.get(1).copied().unwrap_or("")));
                let text = arg(parts.get(2).copied().unwrap_or(""));
                if from.is_empty() {
                    text
                } else {
                    text.replace(&from, &to)
                }
            }
            "addprefix" | "addsuffix" => {
                let parts = split_args(args, 2);
                let fix = arg(parts[0]);
                let list = arg(parts.get(1).copied().unwrap_or(""));
                let join = |w: &str| if word == "addprefix" { format!("{fix}{w}") } else { format!("{w}{fix}") };
                list.split_whitespace().map(join).collect::<Vec<_>>().join(" ")
            }
            "sort" => {
                let mut words: Vec<String> = arg(args).split_whitespace().map(str::to_string).collect();
                words.sort();
                words.dedup();
                words.join(" ")
            }
            "notdir" | "dir" | "basename" | "suffix" => {
                arg(args).split_whitespace().filter_map(|w| file_part(word, w)).collect::<Vec<_>>().join(" ")
            }
            "firstword" => arg(args).split_whitespace().next().unwrap_or("").to_string(),
            "lastword" => arg(args).split_whitespace().last().unwrap_or("").to_string(),
            "words" => arg(args).split_whitespace().count().to_string(),
            "findstring" => {
                let parts = split_args(args, 2);
                let find = arg(parts[0]);
                if arg(parts.get(1).copied().unwrap_or("")).contains(&find) {
                    find
                } else {
                    String::new()
                }
            }
            "foreach" => {
                let parts = split_args(args, 3);
                let var = arg(parts[0]).trim().to_string();
                let list = arg(parts.get(1).copied().unwrap_or(""));
                let body = parts.get(2).copied().unwrap_or("");
                list.split_whitespace()
                    .map(|w| {
                        let mut overlay = self.overlay.to_vec();
                        overlay.push((var.clone(), w.to_string()));
                        Scope { env: self.env, overlay: &overlay }.expand_depth(body, depth + 1)
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            }
            _ => String::new(),
        }
    }
}

/// `$(notdir …)`, `$(dir …)`, `$(basename …)` and `$(suffix …)` of one word, as make gives them.
fn file_part(function: &str, word: &str) -> Option<String> {
    let slash = word.rfind('/').map_or(0, |i| i + 1);
    let (dir, file) = if slash == 0 { ("./", word) } else { (&word[..slash], &word[slash..]) };
    let dot = file.rfind('.').map(|i| slash + i);
    match function {
        "notdir" => Some(file.to_string()),
        "dir" => Some(dir.to_string()),
        "basename" => Some(dot.map_or(word, |i| &word[..i]).to_string()),
        _ => dot.map(|i| word[i..].to_string()),
    }
}

/// `+=`: make adds the separating blank only when the old value is non-empty, and 4.3 leaves
/// the value alone (no blank) when the appended text is empty.
fn append(old: &mut String, new: &str) {
    if old.is_empty() {
        new.clone_into(old);
    } else if !new.is_empty() {
        old.push(' ');
        old.push_str(new);
    }
}

/// Index of the parenthesis closing the one at `s[0]`.
pub(super) fn matching(s: &str, open: char, close: char) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// Split function arguments at top-level commas, at most `n` parts.
fn split_args(s: &str, n: usize) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' | '{' => depth += 1,
            ')' | '}' => depth -= 1,
            ',' if depth == 0 && parts.len() + 1 < n => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// The stem matched by a `%` pattern, or the whole word for an exact match.
fn pattern_match<'w>(pattern: &str, word: &'w str) -> Option<&'w str> {
    match pattern.split_once('%') {
        Some((pre, post)) => word.strip_prefix(pre)?.strip_suffix(post),
        None => (pattern == word).then_some(word),
    }
}

fn patsubst(pattern: &str, replacement: &str, word: &str) -> String {
    match pattern_match(pattern, word) {
        Some(stem) if pattern.contains('%') => replacement.replacen('%', stem, 1),
        Some(_) => replacement.to_string(),
        None => word.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An overlay is set on top for one expansion: it wins over the run's value, the last
    /// entry for a name wins, a recursive variable sees it, and the run is left as it was.
    #[test]
    fn an_overlay_is_on_top_for_one_expansion() {
        let mut env = Env::default();
        env.run(&crate::makefile::parse("B := run\nA = <$(B)>\n"), &mut Evaluate);
        let overlay = [("B".to_string(), "first".to_string()), ("B".to_string(), "last".to_string())];
        assert_eq!(env.expand_with("$(A) $(B)", &overlay), "<last> last");
        assert_eq!(env.expand("$(A) $(B)"), "<run> run");
        assert_eq!(env.expand_with("$(C)", &[("C".to_string(), "$(B)".to_string())]), "$(B)");
    }
    use crate::makefile::parse;

    #[test]
    fn assignments_follow_make() {
        let f = parse("A := x\nA += y\nB = $(C)\nC := late\nD += n\nE ?= 1\nE ?= 2\nV := $(A)$(B)\n");
        let mut env = Env::default();
        env.run(&f, &mut Evaluate);
        assert_eq!(env.value("A"), "x y");
        assert_eq!(env.value("B"), "late");
        assert_eq!(env.value("D"), "n", "+= on an undefined variable adds no blank");
        let f = parse("S := n\nS +=\nT = n\nT +=\nU := n\nU += $(EMPTY)\nW = n\nW += $(EMPTY)\n");
        env.run(&f, &mut Evaluate);
        let appended: Vec<String> = ["S", "T", "U", "W"].iter().map(|v| env.value(v)).collect();
        assert_eq!(appended, ["n", "n", "n", "n "], "appending nothing adds no blank (W appends unexpanded text)");
        assert_eq!(env.value("E"), "1");
        assert_eq!(env.value("V"), "x ylate");
    }

    #[test]
    fn conditionals_and_names_with_references() {
        let f = parse("ifdef CONFIG_A\nX_$(BITS).o := n\nelse ifeq ($(CONFIG_B),y)\nX := b\nelse\nX := c\nendif\n");
        let mut env = Env::with([("BITS".into(), "64".into()), ("CONFIG_B".into(), "y".into())]);
        env.run(&f, &mut Evaluate);
        assert_eq!((env.value("X_64.o"), env.value("X")), (String::new(), "b".to_string()));
        env.set("CONFIG_A", "y");
        env.run(&f, &mut Evaluate);
        assert_eq!(env.value("X_64.o"), "n");
    }

    #[test]
    fn functions_kbuild_uses() {
        let env = Env::with([("L".into(), "ny".into()), ("K".into(), String::new())]);
        assert_eq!(env.expand("$(patsubst n%,,$(L))"), "", "`ny` is one word starting with n");
        assert_eq!(env.expand("$(patsubst n%,,yn $(L))"), "yn");
        assert_eq!(env.expand("$(patsubst n%,, n no)"), "");
        assert_eq!(env.expand("$(if $(K),a,b)"), "b");
        assert_eq!(env.expand("$(filter-out y%, yes n)"), "n");
        assert_eq!(env.expand("$(call cc-option,-x)"), "");
    }
}
