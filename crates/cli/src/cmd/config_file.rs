//! `mantle serve FILE` / `mantle serve --config FILE`: a Redis-style configuration file whose
//! directives are `serve`'s flag names without the dashes, one per line (`max-keys 5000`,
//! `# comments`). The file becomes flags placed before the command line's, and a flag given
//! on the command line drops the file's directive of the same flag, so the command line
//! always wins. Each directive is checked here, with the flag's own parser, so a mistake is
//! reported with the file and line rather than as a flag the user never typed.

use clap::{Arg, ArgAction, Command};
use std::ffi::{OsStr, OsString};
use std::path::Path;

/// Largest configuration file read: a service unit's settings, not data.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// `args` (the whole command line) with `serve`'s configuration file, if one is named,
/// expanded into flags; any other command line is returned unchanged.
pub fn expand(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    if args.get(1).map(OsString::as_os_str) != Some(OsStr::new("serve")) {
        return Ok(args);
    }
    let command = <super::serve::Args as clap::Args>::augment_args(Command::new("serve"));
    let scan = scan(&command, &args[2..]);
    let Some(file) = scan.file else {
        return Ok(args);
    };
    let directives = read(&command, Path::new(&file))?;
    let mut out = args[..2].to_vec();
    for directive in directives {
        if !scan.given.contains(&directive.id) {
            out.extend(directive.flags);
        }
    }
    out.extend(args[2..].iter().cloned());
    Ok(out)
}

/// What the command line after `serve` names: the configuration file, and the flags given.
struct Scan {
    file: Option<OsString>,
    given: Vec<String>,
}

fn scan(command: &Command, args: &[OsString]) -> Scan {
    let mut scan = Scan {
        file: None,
        given: Vec::new(),
    };
    let mut i = 0;
    while i < args.len() {
        let token = args[i].to_string_lossy();
        i += 1;
        if token == "--" {
            break;
        }
        let Some(flag) = token.strip_prefix("--") else {
            if !token.starts_with('-') && scan.file.is_none() {
                scan.file = Some(args[i - 1].clone());
            }
            continue;
        };
        let (name, inline_value) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (flag, None),
        };
        let Some(arg) = find(command, name) else {
            continue; // clap reports it
        };
        let takes_value = arg.get_action().takes_values();
        let value = match inline_value {
            Some(value) => Some(OsString::from(value)),
            None if takes_value => {
                i += 1;
                args.get(i - 1).cloned()
            }
            None => None,
        };
        if arg.get_id() == "config" {
            scan.file = value;
        } else {
            scan.given.push(arg.get_id().to_string());
        }
    }
    scan
}

/// The argument whose long name or alias is `name`.
fn find<'a>(command: &'a Command, name: &str) -> Option<&'a Arg> {
    command.get_arguments().find(|arg| {
        arg.get_long() == Some(name) || arg.get_all_aliases().is_some_and(|a| a.contains(&name))
    })
}

/// One directive of the file, as the flags it stands for.
struct Directive {
    id: String,
    flags: Vec<OsString>,
}

fn read(command: &Command, path: &Path) -> Result<Vec<Directive>, String> {
    let shown = path.display();
    let size = std::fs::metadata(path)
        .map_err(|e| format!("cannot read the configuration file {shown}: {e}"))?
        .len();
    if size > MAX_FILE_BYTES {
        return Err(format!(
            "the configuration file {shown} is {size} bytes, more than the {MAX_FILE_BYTES} \
             a configuration file may have"
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the configuration file {shown}: {e}"))?;
    let mut directives = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |why: String| format!("{shown}:{}: {why}", n + 1);
        directives.push(directive(command, line).map_err(at)?);
    }
    Ok(directives)
}

/// `name value` (or a bare `name`, or `name yes|no`, for a switch) as flags.
fn directive(command: &Command, line: &str) -> Result<Directive, String> {
    let (name, value) = match line.split_once(char::is_whitespace) {
        Some((name, value)) => (name, unquote(value.trim())?),
        None => (line, String::new()),
    };
    let name = name.to_ascii_lowercase();
    let arg = find(command, &name)
        .filter(|arg| !matches!(arg.get_id().as_str(), "config" | "config_file" | "help"))
        .ok_or_else(|| {
            format!(
                "unknown directive '{name}' (directives are `mantle serve` flag names \
                 without the dashes, e.g. `max-keys 5000`; see mantle serve --help)"
            )
        })?;
    let flag = OsString::from(format!("--{}", arg.get_long().unwrap_or(&name)));
    let id = arg.get_id().to_string();
    if !arg.get_action().takes_values() {
        let on = match value.to_ascii_lowercase().as_str() {
            "" | "yes" | "true" | "on" => true,
            "no" | "false" | "off" => false,
            other => return Err(format!("{name} takes yes or no, not '{other}'")),
        };
        let flags = if on { vec![flag] } else { Vec::new() };
        return Ok(Directive { id, flags });
    }
    if value.is_empty() {
        return Err(format!("{name} needs a value"));
    }
    check_value(arg, &name, &value)?;
    Ok(Directive {
        id,
        flags: vec![flag, OsString::from(value)],
    })
}

/// Runs the flag's own parser on `value`, so a bad value is reported at its line.
fn check_value(arg: &Arg, name: &str, value: &str) -> Result<(), String> {
    let alone = Arg::new("value")
        .long("value")
        .action(ArgAction::Set)
        .value_parser(arg.get_value_parser().clone());
    Command::new("check")
        .no_binary_name(true)
        .arg(alone)
        .try_get_matches_from(["--value", value])
        .map(drop)
        .map_err(|e| {
            let rendered = e.render().to_string();
            let first = rendered.lines().next().unwrap_or_default();
            let why = first.strip_prefix("error: ").unwrap_or(first);
            format!(
                "{name} {value}: {}",
                why.replace("'--value <value>'", "the directive")
            )
        })
}

/// A value as Redis writes it: bare, or in double quotes (with `\"` and `\\`).
fn unquote(value: &str) -> Result<String, String> {
    let Some(inner) = value.strip_prefix('"') else {
        return Ok(value.to_string());
    };
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' if chars.as_str().trim().is_empty() => return Ok(out),
            '"' => return Err("text after the closing quote".into()),
            '\\' => out.push(chars.next().ok_or("unterminated quote")?),
            c => out.push(c),
        }
    }
    Err("unterminated quote".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mantle.conf");
        std::fs::write(&path, text).unwrap();
        let path = path.to_string_lossy().into_owned();
        (dir, path)
    }

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    fn strings(args: Vec<OsString>) -> Vec<String> {
        args.into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn directives_become_flags_and_the_command_line_wins() {
        let (_dir, path) = write(
            "# a service unit's settings\n\nmax-keys 5000\nupstream \"redis://127.0.0.1:6379\"\n\
             state-dir /var/lib/mantle\nno-policy yes\nhttp-admin no\nmetrics-listen 127.0.0.1:9121\n",
        );
        let expanded =
            strings(expand(args(&["mantle", "serve", &path, "--max-keys", "7"])).unwrap());
        assert_eq!(
            expanded,
            [
                "mantle",
                "serve",
                "--upstream",
                "redis://127.0.0.1:6379",
                "--state-dir",
                "/var/lib/mantle",
                "--no-policy",
                "--http",
                "127.0.0.1:9121",
                &path,
                "--max-keys",
                "7"
            ]
        );
        let via_flag = strings(
            expand(args(&[
                "mantle",
                "serve",
                "--config",
                &path,
                "--http=127.0.0.1:1",
            ]))
            .unwrap(),
        );
        assert!(via_flag.contains(&"--max-keys".to_string()));
        assert!(!via_flag.contains(&"127.0.0.1:9121".to_string()));
    }

    #[test]
    fn mistakes_name_the_file_and_line() {
        for (text, expected) in [
            ("port 7000\nmax-keys lots\n", ":2: max-keys lots: "),
            ("\n\nmaxkeys 5\n", ":3: unknown directive 'maxkeys'"),
            ("no-policy maybe\n", ":1: no-policy takes yes or no"),
            ("eviction\n", ":1: eviction needs a value"),
            ("eviction nosuch\n", ":1: eviction nosuch: "),
            ("config other.conf\n", ":1: unknown directive 'config'"),
            ("requirepass \"open\n", ":1: unterminated quote"),
        ] {
            let (_dir, path) = write(text);
            let err = expand(args(&["mantle", "serve", &path])).unwrap_err();
            assert!(
                err.starts_with(&path) && err.contains(expected),
                "{text:?}: {err}"
            );
        }
        let err = expand(args(&["mantle", "serve", "--config", "/nonexistent.conf"])).unwrap_err();
        assert!(err.contains("/nonexistent.conf"), "{err}");
    }

    #[test]
    fn other_command_lines_are_unchanged() {
        let line = args(&["mantle", "replay", "trace.csv", "--max-keys", "5"]);
        assert_eq!(expand(line.clone()).unwrap(), line);
        let line = args(&["mantle", "serve", "--data-dir", "d", "--max-keys", "5"]);
        assert_eq!(expand(line.clone()).unwrap(), line);
    }
}
