//! The names `SET ... HINT name` gives keys, interned: a cached entry keeps a `u16` index
//! (0: no hint), and the name is stored once per server however many keys carry it.
//!
//! The table is bounded and clients choose the names, so the names a `--classes` file's
//! `hint:NAME` rules match are reserved at start: a client inventing names can fill only the
//! rest of the table, and a name the operator's rules know always resolves. A name that finds
//! the table full is not refused (that would make every later `SET ... HINT` of a new name fail
//! for every client); the object is stored without a hint, which is what such a name would
//! have matched anyway (no rule names it), and [`HintNames::dropped`] counts it.

use std::collections::HashMap;

/// Most distinct `HINT` class names a server keeps (each costs a string, once), the names
/// `--classes` reserves included.
pub const MAX_CLASSES: usize = 1024;

#[derive(Default, Debug)]
pub struct HintNames {
    /// By index - 1.
    names: Vec<Box<str>>,
    index: HashMap<Box<[u8]>, u16>,
    /// Hints dropped because the table was full.
    dropped: u64,
}

impl HintNames {
    /// A table holding `reserved` (the names `--classes` rules match) before any client's.
    pub fn with_reserved<'a>(reserved: impl IntoIterator<Item = &'a [u8]>) -> HintNames {
        let mut names = HintNames::default();
        for name in reserved {
            names.intern(name);
        }
        names
    }

    /// The index of `name`, adding it if new; 0 (no hint) when the table is full.
    pub fn intern(&mut self, name: &[u8]) -> u16 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        if self.names.len() >= MAX_CLASSES {
            self.dropped += 1;
            return 0;
        }
        self.names.push(String::from_utf8_lossy(name).into());
        let i = self.names.len() as u16;
        self.index.insert(name.into(), i);
        i
    }

    /// The name of index `class` (0: none).
    pub fn name(&self, class: u16) -> Option<&str> {
        (class > 0).then(|| &*self.names[class as usize - 1])
    }

    /// Hints stored as none because the table was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_interned_once_and_bounded() {
        let mut hints = HintNames::default();
        assert_eq!(hints.intern(b"a"), 1);
        assert_eq!(hints.intern(b"b"), 2);
        assert_eq!(hints.intern(b"a"), 1);
        assert_eq!(hints.name(2), Some("b"));
        assert_eq!(hints.name(0), None);
        for i in 2..MAX_CLASSES {
            hints.intern(format!("c{i}").as_bytes());
        }
        assert_eq!(hints.intern(b"one more"), 0, "stored without a hint");
        assert_eq!(hints.dropped(), 1);
        assert_eq!(hints.intern(b"b"), 2, "known names still resolve");
    }

    #[test]
    fn reserved_names_resolve_however_many_names_clients_invent() {
        let mut hints = HintNames::with_reserved([&b"hot"[..], b"cold", b"hot"]);
        for i in 0..2 * MAX_CLASSES {
            hints.intern(format!("fresh{i}").as_bytes());
        }
        let hot = hints.intern(b"hot");
        assert_eq!(hints.name(hot), Some("hot"));
        let cold = hints.intern(b"cold");
        assert_eq!(hints.name(cold), Some("cold"));
        assert_eq!(hints.dropped(), (MAX_CLASSES + 2) as u64);
    }
}
