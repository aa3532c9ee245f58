//! What `--shadow FILE[:k=v,...]` (and `POLICY SHADOW ADD`) names: a policy file, its
//! parameters, and the shadow's own settings, which are taken out of the parameters:
//! `sample=R` (share of the key space, default 1) and `label=NAME` (the candidate's name,
//! default `STEM` or `STEM:k=v,...` when parameters are given).

use policy::{Params, Scalar};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq)]
pub struct ShadowSpec {
    /// The candidate's name, unique among candidates; what `switch()` returns.
    pub name: String,
    pub path: PathBuf,
    pub source: String,
    pub params: Params,
    pub sample: f64,
}

impl ShadowSpec {
    /// Parses `FILE` or `FILE:k=v,k2=v2` and reads the file.
    pub fn parse(spec: &str) -> Result<ShadowSpec, String> {
        let (path, rest) = match spec.find(".lua:") {
            Some(i) => (&spec[..i + 4], Some(&spec[i + 5..])),
            None => (spec, None),
        };
        let mut params = Params::new();
        let mut shown = Vec::new();
        for kv in rest.unwrap_or("").split(',').filter(|s| !s.is_empty()) {
            let (k, v) = policy::parse_param(kv)?;
            if k != "label" && k != "sample" {
                shown.push(kv.to_string());
            }
            params.insert(k, v);
        }
        let label = match params.remove("label") {
            Some(Scalar::Str(s)) => Some(s),
            Some(Scalar::Number(n)) => Some(n.to_string()),
            Some(Scalar::Bool(b)) => Some(b.to_string()),
            None => None,
        };
        let sample = match params.remove("sample") {
            None => 1.0,
            Some(Scalar::Number(r)) if r > 0.0 && r <= 1.0 => r,
            Some(other) => {
                return Err(format!("sample={other}: expected a share in (0, 1]"));
            }
        };
        let path = PathBuf::from(path);
        let source = std::fs::read_to_string(&path)
            .map_err(|e| format!("{}: cannot read policy: {e}", path.display()))?;
        let stem = stem(&path);
        let name = label.unwrap_or_else(|| {
            if shown.is_empty() {
                stem
            } else {
                format!("{stem}:{}", shown.join(","))
            }
        });
        Ok(ShadowSpec {
            name,
            path,
            source,
            params,
            sample,
        })
    }
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "policy".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shadow_settings_are_taken_out_of_the_params() {
        let dir = std::env::temp_dir().join(format!("adapt-spec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("fixed.lua");
        std::fs::write(&file, "function when() return false end").unwrap();
        let f = file.display();
        let s = ShadowSpec::parse(&format!("{f}:n=10,sample=0.5")).unwrap();
        assert_eq!(s.name, "fixed:n=10");
        assert_eq!(s.sample, 0.5);
        assert_eq!(s.params.len(), 1);
        let s = ShadowSpec::parse(&format!("{f}:label=small")).unwrap();
        assert_eq!((s.name.as_str(), s.sample), ("small", 1.0));
        assert!(ShadowSpec::parse(&format!("{f}:sample=2"))
            .unwrap_err()
            .contains("sample=2"));
        assert!(ShadowSpec::parse("/nonexistent.lua")
            .unwrap_err()
            .contains("/nonexistent.lua"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
