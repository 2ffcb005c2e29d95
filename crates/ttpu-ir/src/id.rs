//! Typed `u32` ids and the arena vector they index.
//!
//! Every kind of id is its own newtype, so a `NodeId` can never index the value table.
//! Ids are dense and allocated in creation order; only `Graph::compact` renumbers them.

use std::marker::PhantomData;

/// A typed index into an [`IdVec`].
pub trait EntityId: Copy + Eq + Ord + std::hash::Hash + std::fmt::Debug {
    /// Wraps a raw index.
    fn new(index: usize) -> Self;
    /// The raw index.
    fn index(self) -> usize;
}

macro_rules! entity_id {
    ($(#[$meta:meta])* $name:ident, $prefix:literal) => {
        $(#[$meta])*
        #[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(u32);

        impl $crate::id::EntityId for $name {
            fn new(index: usize) -> Self {
                $name(u32::try_from(index).expect("graphs hold fewer than 2^32 entities"))
            }
            fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}
pub(crate) use entity_id;

/// An owning arena indexed by a typed id.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdVec<K, V> {
    items: Vec<V>,
    marker: PhantomData<K>,
}

impl<K: EntityId, V> IdVec<K, V> {
    /// An empty arena.
    pub fn new() -> Self {
        IdVec { items: Vec::new(), marker: PhantomData }
    }

    /// Appends `value` and returns its id.
    pub fn push(&mut self, value: V) -> K {
        let id = K::new(self.items.len());
        self.items.push(value);
        id
    }

    /// Removes every entry, keeping the allocation for reuse.
    pub fn clear(&mut self) {
        self.items.clear();
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the arena is empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The entry for `id`, if it exists.
    pub fn get(&self, id: K) -> Option<&V> {
        self.items.get(id.index())
    }

    /// Ids and entries in creation order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (K, &V)> + '_ {
        self.items.iter().enumerate().map(|(index, value)| (K::new(index), value))
    }

    /// Ids in creation order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = K> + use<K, V> {
        (0..self.items.len()).map(K::new)
    }

    /// Entries in creation order.
    pub fn values(&self) -> std::slice::Iter<'_, V> {
        self.items.iter()
    }
}

impl<K: EntityId, V> Default for IdVec<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: EntityId, V> std::ops::Index<K> for IdVec<K, V> {
    type Output = V;
    fn index(&self, id: K) -> &V {
        &self.items[id.index()]
    }
}

impl<K: EntityId, V> std::ops::IndexMut<K> for IdVec<K, V> {
    fn index_mut(&mut self, id: K) -> &mut V {
        &mut self.items[id.index()]
    }
}

impl<K: EntityId, V: std::fmt::Debug> std::fmt::Debug for IdVec<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}
