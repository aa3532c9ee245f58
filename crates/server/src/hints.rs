//! The names `SET ... HINT name` gives keys, interned: a cached entry keeps a `u16` index
//! (0: no hint), and the name is stored once per server however many keys carry it.

/// Most distinct `HINT` class names a server keeps (each costs a string, once).
pub const MAX_CLASSES: usize = 1024;

#[derive(Default, Debug)]
pub struct HintNames {
    /// By index - 1.
    names: Vec<String>,
}

impl HintNames {
    /// The index of `name`, adding it if new; fails past [`MAX_CLASSES`] names.
    pub fn intern(&mut self, name: &[u8]) -> Result<u16, String> {
        let name = String::from_utf8_lossy(name);
        if let Some(i) = self.names.iter().position(|c| *c == name) {
            return Ok(i as u16 + 1);
        }
        if self.names.len() >= MAX_CLASSES {
            return Err(format!(
                "too many cache classes (at most {MAX_CLASSES} distinct HINT names)"
            ));
        }
        self.names.push(name.into_owned());
        Ok(self.names.len() as u16)
    }

    /// The name of index `class` (0: none).
    pub fn name(&self, class: u16) -> Option<&str> {
        (class > 0).then(|| self.names[class as usize - 1].as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_interned_once_and_bounded() {
        let mut hints = HintNames::default();
        assert_eq!(hints.intern(b"a"), Ok(1));
        assert_eq!(hints.intern(b"b"), Ok(2));
        assert_eq!(hints.intern(b"a"), Ok(1));
        assert_eq!(hints.name(2), Some("b"));
        assert_eq!(hints.name(0), None);
        for i in 2..MAX_CLASSES {
            hints.intern(format!("c{i}").as_bytes()).unwrap();
        }
        assert!(hints.intern(b"one more").unwrap_err().contains("too many"));
        assert_eq!(hints.intern(b"b"), Ok(2), "known names still resolve");
    }
}
