//! Which module of a crate uses which, read from its sources with `syn`: the graph the layers
//! test checks for loops. A file's references are its `use` items and every path in its code
//! (`crate::git::Foo`, `super::watch::bar()`), resolved through the modules' own items and
//! imports, so a name re-exported by a `mod.rs` counts against the file that defines it.
//! Test code (`#[cfg(test)]`) is left out: tests may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// A module's path from the crate root: `[]` is `lib.rs`, `["git", "worktree"]` is
/// `git/worktree/mod.rs`.
pub type ModPath = Vec<String>;

/// One reference from a module to another, with where it was seen (for the failure message).
#[derive(Debug, Clone)]
pub struct Reference {
    pub from: ModPath,
    pub to: ModPath,
    pub seen: String,
}

#[derive(Default)]
struct Module {
    file: PathBuf,
    children: BTreeSet<String>,
    /// Items defined here (functions, types, traits, constants, macros).
    items: BTreeSet<String>,
    /// Names brought in by `use`, each to the absolute path it names.
    imports: BTreeMap<String, Vec<String>>,
    /// Every path the module's code names, as written, made absolute where it can be.
    paths: Vec<Vec<String>>,
}

/// The crate under `src` (its `lib.rs` or `main.rs`), parsed.
pub struct Crate {
    modules: BTreeMap<ModPath, Module>,
}

impl Crate {
    pub fn read(src: &Path) -> Crate {
        let root = ["lib.rs", "main.rs"]
            .iter()
            .map(|name| src.join(name))
            .find(|path| path.exists())
            .expect("a lib.rs or main.rs");
        let mut krate = Crate {
            modules: BTreeMap::new(),
        };
        krate.read_module(Vec::new(), &root);
        // Imports as written (`super::x::Y`) made absolute, so that a re-export resolves
        // from anywhere.
        let absolute: Vec<(ModPath, String, Vec<String>)> = krate
            .modules
            .iter()
            .flat_map(|(at, m)| {
                let krate = &krate;
                m.imports.iter().filter_map(move |(name, target)| {
                    let full = krate.absolute(at, target, false)?;
                    Some((at.clone(), name.clone(), full))
                })
            })
            .collect();
        for module in krate.modules.values_mut() {
            module.imports.clear();
        }
        for (at, name, full) in absolute {
            krate
                .modules
                .get_mut(&at)
                .unwrap()
                .imports
                .insert(name, full);
        }
        krate
    }

    fn read_module(&mut self, path: ModPath, file: &Path) {
        let text = std::fs::read_to_string(file).unwrap();
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut module = Module {
            file: file.to_path_buf(),
            ..Module::default()
        };
        let mut children = Vec::new();
        collect_items(&ast.items, &mut module, &mut children);
        self.modules.insert(path.clone(), module);
        let dir = if path.is_empty() || file.ends_with("mod.rs") {
            file.parent().unwrap().to_path_buf()
        } else {
            file.with_extension("")
        };
        for (name, explicit) in children {
            let child_file = match explicit {
                Some(rel) => dir.join(rel),
                None if dir.join(format!("{name}.rs")).exists() => dir.join(format!("{name}.rs")),
                None => dir.join(&name).join("mod.rs"),
            };
            let mut child = path.clone();
            child.push(name);
            self.read_module(child, &child_file);
        }
    }

    /// Where `path` (absolute, from the crate root) is defined: the deepest module it passes
    /// through, following imports and re-exports. `None` for what is not in this crate.
    fn resolve(&self, path: &[String], depth: usize) -> Option<ModPath> {
        if depth > 16 {
            return None;
        }
        let mut at: ModPath = Vec::new();
        for (i, segment) in path.iter().enumerate() {
            let module = &self.modules[&at];
            if module.children.contains(segment) {
                at.push(segment.clone());
                continue;
            }
            if module.items.contains(segment) {
                return Some(at);
            }
            if let Some(target) = module.imports.get(segment) {
                let mut full = target.clone();
                full.extend_from_slice(&path[i + 1..]);
                return self.resolve(&full, depth + 1).or(Some(at));
            }
            return Some(at);
        }
        Some(at)
    }

    /// Every reference from one module to another, made absolute and resolved.
    pub fn references(&self) -> Vec<Reference> {
        let mut out = Vec::new();
        for (from, module) in &self.modules {
            for written in &module.paths {
                let Some(absolute) = self.absolute(from, written, true) else {
                    continue;
                };
                let Some(to) = self.resolve(&absolute, 0) else {
                    continue;
                };
                if &to != from {
                    let file = module.file.file_name().unwrap().to_string_lossy();
                    out.push(Reference {
                        from: from.clone(),
                        to,
                        seen: format!("{}: {}", file_of(from, &file), written.join("::")),
                    });
                }
            }
        }
        out
    }

    /// A path as written in module `at`, from the crate root; `None` if it leaves the crate.
    fn absolute(&self, at: &ModPath, written: &[String], imports: bool) -> Option<Vec<String>> {
        let mut base = at.clone();
        let mut rest = written;
        match written.first()?.as_str() {
            "crate" => {
                base.clear();
                rest = &written[1..];
            }
            "self" => rest = &written[1..],
            "super" => {
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            first => {
                let module = &self.modules[at];
                if let Some(target) = module.imports.get(first).filter(|_| imports) {
                    let mut full = target.clone();
                    full.extend_from_slice(&rest[1..]);
                    return Some(full);
                }
                if !module.children.contains(first) {
                    return None;
                }
            }
        }
        base.extend_from_slice(rest);
        Some(base)
    }
}

fn file_of(module: &ModPath, file: &str) -> String {
    let mut parts = module.clone();
    if file == "mod.rs" || parts.is_empty() {
        parts.push(file.to_string());
    } else {
        parts.pop();
        parts.push(file.to_string());
    }
    parts.join("/")
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

fn collect_items(
    items: &[syn::Item],
    module: &mut Module,
    children: &mut Vec<(String, Option<String>)>,
) {
    for item in items {
        let name = match item {
            syn::Item::Mod(m) if is_test(&m.attrs) => continue,
            syn::Item::Mod(m) => {
                let name = m.ident.to_string();
                if let Some((_, inner)) = &m.content {
                    // An inline module: its items count as this file's.
                    collect_items(inner, module, children);
                } else {
                    let explicit = m.attrs.iter().find(|a| a.path().is_ident("path"));
                    let explicit = explicit.and_then(|a| match &a.meta {
                        syn::Meta::NameValue(nv) => match &nv.value {
                            syn::Expr::Lit(syn::ExprLit {
                                lit: syn::Lit::Str(s),
                                ..
                            }) => Some(s.value()),
                            _ => None,
                        },
                        _ => None,
                    });
                    module.children.insert(name.clone());
                    children.push((name, explicit));
                }
                continue;
            }
            syn::Item::Use(u) if is_test(&u.attrs) => continue,
            syn::Item::Use(u) => {
                collect_use(&u.tree, Vec::new(), module);
                continue;
            }
            syn::Item::Fn(f) if is_test(&f.attrs) => continue,
            syn::Item::Impl(i) if is_test(&i.attrs) => continue,
            syn::Item::Fn(f) => Some(f.sig.ident.to_string()),
            syn::Item::Struct(s) => Some(s.ident.to_string()),
            syn::Item::Enum(e) => Some(e.ident.to_string()),
            syn::Item::Trait(t) => Some(t.ident.to_string()),
            syn::Item::Type(t) => Some(t.ident.to_string()),
            syn::Item::Const(c) => Some(c.ident.to_string()),
            syn::Item::Static(s) => Some(s.ident.to_string()),
            syn::Item::Union(u) => Some(u.ident.to_string()),
            syn::Item::Macro(m) => m.ident.as_ref().map(ToString::to_string),
            _ => None,
        };
        if let Some(name) = name {
            module.items.insert(name);
        }
        let mut paths = Paths(Vec::new());
        paths.visit_item(item);
        module.paths.extend(paths.0);
    }
}

/// `use a::{b, c::d as e}` as names to absolute-or-relative paths; each import is also a
/// reference of the module.
fn collect_use(tree: &syn::UseTree, mut prefix: Vec<String>, module: &mut Module) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            collect_use(&p.tree, prefix, module);
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            if name == "self" {
                if let Some(last) = prefix.last().cloned() {
                    module.imports.insert(last, prefix.clone());
                }
            } else {
                prefix.push(name.clone());
                module.imports.insert(name, prefix.clone());
            }
            module.paths.push(prefix);
        }
        syn::UseTree::Rename(r) => {
            prefix.push(r.ident.to_string());
            module.imports.insert(r.rename.to_string(), prefix.clone());
            module.paths.push(prefix);
        }
        syn::UseTree::Glob(_) => module.paths.push(prefix),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                collect_use(tree, prefix.clone(), module);
            }
        }
    }
}

/// Every path of two or more segments in an item's code, skipping test code.
struct Paths(Vec<Vec<String>>);

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_test(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        // A `use` inside a function body (top-level ones are read by `collect_use`).
        let mut module = Module::default();
        collect_use(&u.tree, Vec::new(), &mut module);
        self.0.extend(module.paths);
    }
    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if segments.len() >= 2 || path.leading_colon.is_none() && !segments.is_empty() {
            self.0.push(segments);
        }
        syn::visit::visit_path(self, path);
    }
}

/// For each module with children: which child uses which (a reference between two modules
/// counts at the level of their nearest common parent; a module using its own ancestors'
/// items, or its descendants', makes no edge).
pub fn sibling_edges(refs: &[Reference]) -> BTreeMap<ModPath, BTreeMap<(String, String), String>> {
    let mut levels: BTreeMap<ModPath, BTreeMap<(String, String), String>> = BTreeMap::new();
    for r in refs {
        let common = r.from.iter().zip(&r.to).take_while(|(a, b)| a == b).count();
        if common == r.from.len() || common == r.to.len() {
            continue;
        }
        let parent = r.from[..common].to_vec();
        let edge = (r.from[common].clone(), r.to[common].clone());
        levels
            .entry(parent)
            .or_default()
            .entry(edge)
            .or_insert_with(|| r.seen.clone());
    }
    levels
}

/// The loops among one level's children, each as its members in order.
pub fn cycles(edges: &BTreeMap<(String, String), String>) -> Vec<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        next.entry(a).or_default().push(b);
    }
    let mut found: Vec<Vec<String>> = Vec::new();
    let mut seen_sets: BTreeSet<BTreeSet<String>> = BTreeSet::new();
    for start in next.keys() {
        let mut stack = vec![(*start, vec![*start])];
        while let Some((node, trail)) = stack.pop() {
            for &n in next.get(node).into_iter().flatten() {
                if n == *start {
                    let set: BTreeSet<String> = trail.iter().map(|s| s.to_string()).collect();
                    if seen_sets.insert(set) {
                        found.push(trail.iter().map(|s| s.to_string()).collect());
                    }
                } else if !trail.contains(&n) && trail.len() < 8 {
                    let mut t = trail.clone();
                    t.push(n);
                    stack.push((n, t));
                }
            }
        }
    }
    found
}
