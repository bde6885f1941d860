//! Typed indices: [`NodeId`](crate::graph::NodeId), [`GroupId`](crate::graph::GroupId) and
//! [`DeviceId`](crate::cluster::DeviceId) are distinct types, so passing a device where a node
//! belongs is a compile error rather than a wrong answer or a panic.
//!
//! An id is made by the thing it indexes ([`OpGraph::id`](crate::graph::OpGraph::id),
//! [`OpGraph::node_id`](crate::graph::OpGraph::node_id),
//! [`Cluster::device_id`](crate::cluster::Cluster::device_id), …), which checks a number given by
//! a user and names it in the error when it is out of range. Serialised, an id is its number.

/// Defines an index newtype over `u32` with `index()`, `Display` (the number) and a crate-private
/// constructor from `usize`.
macro_rules! index_type {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(
            Clone,
            Copy,
            Debug,
            PartialEq,
            Eq,
            PartialOrd,
            Ord,
            Hash,
            serde::Serialize,
            serde::Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(u32);

        impl $name {
            /// The id of position `index`. Crate-private: users get ids from what they index.
            ///
            /// # Panics
            /// If `index` does not fit in 32 bits (no graph or cluster is that large).
            #[inline]
            #[allow(dead_code)]
            pub(crate) fn new(index: usize) -> Self {
                match u32::try_from(index) {
                    Ok(i) => $name(i),
                    Err(_) => panic!(concat!(stringify!($name), " {} does not fit in 32 bits"), index),
                }
            }

            /// The position this id stands for.
            #[inline]
            pub const fn index(self) -> usize {
                self.0 as usize
            }

            /// Ids `0..n`, for loops over everything a container of `n` holds.
            #[inline]
            #[allow(dead_code)]
            pub(crate) fn range(n: usize) -> impl DoubleEndedIterator<Item = Self> + ExactSizeIterator + Clone {
                (0..n).map(Self::new)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }

        // Plain vectors and slices indexed by position take ids too, so the hot loops of the
        // cost model, placers and simulator keep their flat arrays; the types guard the
        // boundaries (which function takes a node, which a device).
        impl<T> std::ops::Index<$name> for [T] {
            type Output = T;
            #[inline]
            fn index(&self, id: $name) -> &T {
                &self[id.index()]
            }
        }

        impl<T> std::ops::IndexMut<$name> for [T] {
            #[inline]
            fn index_mut(&mut self, id: $name) -> &mut T {
                &mut self[id.index()]
            }
        }

        impl<T> std::ops::Index<$name> for Vec<T> {
            type Output = T;
            #[inline]
            fn index(&self, id: $name) -> &T {
                &self[id.index()]
            }
        }

        impl<T> std::ops::IndexMut<$name> for Vec<T> {
            #[inline]
            fn index_mut(&mut self, id: $name) -> &mut T {
                &mut self[id.index()]
            }
        }

        impl From<$name> for usize {
            #[inline]
            fn from(id: $name) -> usize {
                id.index()
            }
        }
    };
}

pub(crate) use index_type;
