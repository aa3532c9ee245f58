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
        let (label, sample) = take_options(&mut params)?;
        let path = PathBuf::from(path);
        let source = policy::read_policy_file(&path)?;
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

impl ShadowSpec {
    /// A candidate whose source is at hand (the server's registry versions): `params` may
    /// hold the shadow's own `sample` and `label`, taken out as [`ShadowSpec::parse`] does;
    /// without a label it is named `default_name`, then `:k=v,...` for the other params.
    /// `shown` is what its errors name it by (a path, or `name@N`).
    pub fn from_source(
        default_name: &str,
        shown: &str,
        source: String,
        mut params: Params,
    ) -> Result<ShadowSpec, String> {
        let (label, sample) = take_options(&mut params)?;
        let name = label.unwrap_or_else(|| {
            let pairs: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
            if pairs.is_empty() {
                default_name.to_string()
            } else {
                format!("{default_name}:{}", pairs.join(","))
            }
        });
        Ok(ShadowSpec {
            name,
            path: PathBuf::from(shown),
            source,
            params,
            sample,
        })
    }
}

/// Takes the shadow's own settings, `label` and `sample`, out of `params`.
fn take_options(params: &mut Params) -> Result<(Option<String>, f64), String> {
    let label = match params.remove("label") {
        Some(Scalar::Str(s)) => Some(checked_label(s)?),
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
    Ok((label, sample))
}

/// A label names the candidate in reports and in `k=v,...` lists, and in the server's
/// line-oriented replies: it must be non-empty and hold none of `=`, `,` or control
/// characters (a CR or LF would split a reply line).
fn checked_label(label: String) -> Result<String, String> {
    let bad = label
        .chars()
        .find(|c| *c == '=' || *c == ',' || c.is_control());
    match (label.is_empty(), bad) {
        (true, _) => Err("label=: a shadow label may not be empty".into()),
        (false, Some(c)) => Err(format!(
            "label={label:?}: a shadow label may not contain {c:?} ('=', ',' and control \
             characters are refused)"
        )),
        (false, None) => Ok(label),
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

    #[test]
    fn a_source_at_hand_takes_the_same_options() {
        let mut params = Params::new();
        for kv in ["n=10", "sample=0.25"] {
            let (k, v) = policy::parse_param(kv).unwrap();
            params.insert(k, v);
        }
        let s =
            ShadowSpec::from_source("fixed@2", "fixed@2", "x = 1".into(), params.clone()).unwrap();
        assert_eq!(
            (s.name.as_str(), s.sample, s.params.len()),
            ("fixed@2:n=10", 0.25, 1)
        );
        params.insert("sample".into(), Scalar::Number(0.0));
        assert!(ShadowSpec::from_source("f@1", "f@1", String::new(), params)
            .unwrap_err()
            .contains("sample=0"));
    }

    #[test]
    fn labels_that_would_break_a_listing_are_refused() {
        for (label, says) in [
            ("", "may not be empty"),
            ("a=b", "'='"),
            ("a,b", "','"),
            ("a\rb", "'\\r'"),
            ("a\nb", "'\\n'"),
        ] {
            let mut params = Params::new();
            params.insert("label".into(), Scalar::Str(label.into()));
            let err = ShadowSpec::from_source("f@1", "f@1", String::new(), params).unwrap_err();
            assert!(err.contains(says), "{label:?}: {err}");
        }
        let mut params = Params::new();
        params.insert("label".into(), Scalar::Str("small-2".into()));
        let s = ShadowSpec::from_source("f@1", "f@1", String::new(), params).unwrap();
        assert_eq!(s.name, "small-2");
    }
}
