//! A GraphDef's function library checked before TensorFlow sees it: TensorFlow's import infers
//! shapes through function calls recursively (`ShapeRefiner::InferShapesForFunction`), so a
//! function that calls itself — directly, through other functions, or through a functional op's
//! attribute (`PartitionedCall.f`, `While.body`, `If.then_branch`, …) — recurses until the stack
//! runs out and the process aborts. [`check_function_library`] refuses such a library, and one
//! whose calls nest deeper than [`MAX_FUNCTION_DEPTH`], with an error naming the functions.

use std::collections::{BTreeMap, BTreeSet};

use prost::Message;

use crate::error::{Error, Result};

/// The deepest chain of function calls accepted (a function calling a function … this many
/// levels). Real graphs nest a few levels (a loop body inside a function inside a loop).
pub const MAX_FUNCTION_DEPTH: usize = 64;

/// `FunctionDefLibrary`, only what names calls.
#[derive(Clone, PartialEq, Message)]
struct Library {
    #[prost(message, repeated, tag = "1")]
    function: Vec<Function>,
}

/// `FunctionDef`: its signature's name and its nodes.
#[derive(Clone, PartialEq, Message)]
struct Function {
    #[prost(message, optional, tag = "1")]
    signature: Option<Signature>,
    #[prost(message, repeated, tag = "3")]
    node_def: Vec<Node>,
}

/// `OpDef`: only the name.
#[derive(Clone, PartialEq, Message)]
struct Signature {
    #[prost(string, tag = "1")]
    name: String,
}

/// `NodeDef`: the op (a function name calls that function) and attributes (`func` values call
/// theirs).
#[derive(Clone, PartialEq, Message)]
struct Node {
    #[prost(string, tag = "2")]
    op: String,
    #[prost(btree_map = "string, message", tag = "5")]
    attr: BTreeMap<String, Attr>,
}

/// `AttrValue`: a `func`, or a list of them.
#[derive(Clone, PartialEq, Message)]
struct Attr {
    #[prost(message, optional, tag = "1")]
    list: Option<AttrList>,
    #[prost(message, optional, tag = "10")]
    func: Option<NameAttrList>,
}

/// `AttrValue.ListValue`: only `func`.
#[derive(Clone, PartialEq, Message)]
struct AttrList {
    #[prost(message, repeated, tag = "9")]
    func: Vec<NameAttrList>,
}

/// `NameAttrList`: a function name and its own attributes (which may name more functions).
#[derive(Clone, PartialEq, Message)]
struct NameAttrList {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(btree_map = "string, message", tag = "2")]
    attr: BTreeMap<String, Attr>,
}

fn called_by_attr(attr: &Attr, out: &mut BTreeSet<String>) {
    let funcs = attr
        .func
        .iter()
        .chain(attr.list.iter().flat_map(|l| &l.func));
    for f in funcs {
        out.insert(f.name.clone());
        for a in f.attr.values() {
            called_by_attr(a, out);
        }
    }
}

/// Checks the serialized `FunctionDefLibrary` of the GraphDef `what`: no function calls itself,
/// directly or through others, and no chain of calls is deeper than [`MAX_FUNCTION_DEPTH`].
///
/// # Errors
/// [`Error::FunctionLibrary`] naming the cycle (`f → g → f`) or the chain, or the library's
/// bytes if they do not decode.
pub fn check_function_library(library: &[u8], what: &str) -> Result<()> {
    let bad = |reason: String| Error::FunctionLibrary {
        what: what.into(),
        reason,
    };
    let lib = Library::decode(library).map_err(|e| bad(format!("does not decode: {e}")))?;
    // Function name → the library functions it calls.
    let mut calls: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &lib.function {
        let name = f
            .signature
            .as_ref()
            .map(|s| s.name.clone())
            .unwrap_or_default();
        let mut out = BTreeSet::new();
        for node in &f.node_def {
            out.insert(node.op.clone());
            for a in node.attr.values() {
                called_by_attr(a, &mut out);
            }
        }
        calls.entry(name).or_default().extend(out);
    }
    let known: BTreeSet<String> = calls.keys().cloned().collect();
    for out in calls.values_mut() {
        out.retain(|c| known.contains(c));
    }
    // Depth-first search without recursion: 0 = unseen, 1 = on the path, 2 = done with `depth`.
    let mut state: BTreeMap<&str, u8> = BTreeMap::new();
    let mut depth: BTreeMap<&str, usize> = BTreeMap::new();
    for root in calls.keys() {
        if state.get(root.as_str()).copied().unwrap_or(0) != 0 {
            continue;
        }
        let mut path: Vec<(&str, Vec<&str>)> = vec![(root, children(&calls, root))];
        state.insert(root, 1);
        while let Some((node, pending)) = path.last_mut() {
            let node: &str = node;
            match pending.pop() {
                Some(next) => match state.get(next).copied().unwrap_or(0) {
                    0 => {
                        state.insert(next, 1);
                        path.push((next, children(&calls, next)));
                    }
                    1 => {
                        let start = path.iter().position(|(n, _)| *n == next).unwrap_or(0);
                        let mut cycle: Vec<&str> = path[start..].iter().map(|(n, _)| *n).collect();
                        cycle.push(next);
                        return Err(bad(format!(
                            "function `{next}` calls itself ({}); TensorFlow's import would \
                             recurse until it aborts",
                            cycle.join(" → ")
                        )));
                    }
                    _ => {}
                },
                None => {
                    let d = 1 + calls[node]
                        .iter()
                        .map(|c| depth.get(c.as_str()).copied().unwrap_or(0))
                        .max()
                        .unwrap_or(0);
                    if d > MAX_FUNCTION_DEPTH {
                        return Err(bad(format!(
                            "function `{node}` starts a chain of {d} nested function calls; at \
                             most {MAX_FUNCTION_DEPTH} are accepted"
                        )));
                    }
                    depth.insert(node, d);
                    state.insert(node, 2);
                    path.pop();
                }
            }
        }
    }
    Ok(())
}

/// The names of the functions the serialized `FunctionDefLibrary` defines: a node whose op
/// type is one of them calls that function (and needs no kernel of its own).
///
/// # Errors
/// [`Error::FunctionLibrary`] naming `what` if the bytes do not decode.
pub fn function_names(library: &[u8], what: &str) -> Result<BTreeSet<String>> {
    let lib = Library::decode(library).map_err(|e| Error::FunctionLibrary {
        what: what.into(),
        reason: format!("does not decode: {e}"),
    })?;
    Ok(lib
        .function
        .iter()
        .filter_map(|f| f.signature.as_ref().map(|s| s.name.clone()))
        .collect())
}

fn children<'a>(calls: &'a BTreeMap<String, BTreeSet<String>>, node: &str) -> Vec<&'a str> {
    calls
        .get(node)
        .map(|c| c.iter().map(String::as_str).collect())
        .unwrap_or_default()
}

/// One function for [`library_bytes`]: its name and its nodes, each an op and the functions its
/// `func` attributes name.
pub type FunctionSpec<'a> = (&'a str, &'a [(&'a str, &'a [&'a str])]);

/// Serialized `FunctionDefLibrary` bytes of `functions`. For tests and the fuzz harness's seeds.
#[doc(hidden)]
pub fn library_bytes(functions: &[FunctionSpec<'_>]) -> Vec<u8> {
    let lib = Library {
        function: functions
            .iter()
            .map(|(name, nodes)| Function {
                signature: Some(Signature {
                    name: (*name).into(),
                }),
                node_def: nodes
                    .iter()
                    .map(|(op, funcs)| Node {
                        op: (*op).into(),
                        attr: funcs
                            .iter()
                            .enumerate()
                            .map(|(i, f)| {
                                (
                                    format!("f{i}"),
                                    Attr {
                                        list: None,
                                        func: Some(NameAttrList {
                                            name: (*f).into(),
                                            attr: BTreeMap::new(),
                                        }),
                                    },
                                )
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect(),
    };
    lib.encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_mutual_and_attribute_recursion_are_refused() {
        let direct = library_bytes(&[("f", &[("f", &[])])]);
        let e = check_function_library(&direct, "g.pb")
            .unwrap_err()
            .to_string();
        assert!(e.contains("g.pb") && e.contains("f → f"), "{e}");
        let mutual = library_bytes(&[("a", &[("Add", &[]), ("b", &[])]), ("b", &[("a", &[])])]);
        let e = check_function_library(&mutual, "g.pb")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a → b → a"), "{e}");
        // A While whose body calls the function holding the While.
        let body = library_bytes(&[
            ("outer", &[("While", &["cond", "body"])]),
            ("cond", &[("Less", &[])]),
            ("body", &[("PartitionedCall", &["outer"])]),
        ]);
        let e = check_function_library(&body, "g.pb")
            .unwrap_err()
            .to_string();
        assert!(e.contains("calls itself") && e.contains("outer"), "{e}");
    }

    #[test]
    fn acyclic_libraries_pass_and_deep_chains_are_bounded() {
        let ok = library_bytes(&[
            ("outer", &[("While", &["cond", "body"])]),
            ("cond", &[("Less", &[])]),
            ("body", &[("PartitionedCall", &["leaf"]), ("leaf", &[])]),
            ("leaf", &[("Relu", &[])]),
        ]);
        check_function_library(&ok, "g.pb").unwrap();
        check_function_library(&[], "g.pb").unwrap();
        let names: Vec<String> = (0..=MAX_FUNCTION_DEPTH).map(|i| format!("f{i}")).collect();
        let nodes: Vec<[(&str, &[&str]); 1]> = (0..=MAX_FUNCTION_DEPTH)
            .map(|i| [(names.get(i + 1).map_or("NoOp", String::as_str), &[][..])])
            .collect();
        let funcs: Vec<FunctionSpec<'_>> = names
            .iter()
            .zip(&nodes)
            .map(|(n, ns)| (n.as_str(), &ns[..]))
            .collect();
        let e = check_function_library(&library_bytes(&funcs), "g.pb").unwrap_err();
        assert!(e.to_string().contains("nested"), "{e}");
        let e = check_function_library(b"\x0a\xff", "g.pb").unwrap_err();
        assert!(e.to_string().contains("does not decode"), "{e}");
    }

    #[test]
    fn function_names_are_the_signatures_names() {
        let lib = library_bytes(&[("outer", &[("inner", &[])]), ("inner", &[("Relu", &[])])]);
        let names = function_names(&lib, "g.pb").unwrap();
        assert_eq!(names, BTreeSet::from(["inner".into(), "outer".into()]));
        assert!(function_names(&[], "g.pb").unwrap().is_empty());
        assert!(function_names(b"\x0a\xff", "g.pb").is_err());
    }
}
