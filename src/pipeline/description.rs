//! Reading a chain's configuration description (`stage(key=value, …) | stage(…)`, what
//! `stage::describe` writes and a checkpoint records): the settings of one stage, the
//! differences between two descriptions, and which shuffled permutation a description names.
//! A leaf: it imports nothing of the pipeline, so every stage may use it.

/// One stage of a configuration description: its name and its `key=value` settings, in order.
pub(super) type DescribedStage<'a> = (&'a str, Vec<(&'a str, &'a str)>);

/// True if `description` (a checkpoint's [`super::LoaderState::config`]) has a shuffled sampler or mix
/// without a `permutation` setting: it was taken by a version whose shuffled order was
/// [`super::sampler::Network::Balanced`]'s, and resumes with it.
pub(crate) fn balanced_network_in(description: &str) -> bool {
    parse_description(description).is_some_and(|stages| {
        stages.iter().any(|(name, settings)| {
            matches!(*name, "sampler" | "mix")
                && setting(settings, "mode") == Some("Shuffled")
                && setting(settings, "permutation").is_none()
        })
    })
}

/// The name of the user stage `description` records (`stage(name="…")`, the name as written:
/// quoted), if it records one.
pub(crate) fn user_stage_in(description: &str) -> Option<String> {
    let stages = parse_description(description)?;
    let name = setting(stage(&stages, "stage")?, "name")?;
    Some(name.to_string())
}

/// Splits `s` at every top-level occurrence of `sep` (outside brackets and quoted strings).
fn split_top<'a>(s: &'a str, sep: &str) -> Vec<&'a str> {
    let mut parts = Vec::new();
    let (mut depth, mut quoted, mut escaped, mut start) = (0usize, false, false, 0usize);
    for (i, c) in s.char_indices() {
        if quoted {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => quoted = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            // Depth counts brackets of a string in memory: it cannot reach usize::MAX.
            '(' | '[' | '{' => depth = depth.saturating_add(1),
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ if depth == 0 && i >= start && s.get(i..).is_some_and(|r| r.starts_with(sep)) => {
                parts.extend(s.get(start..i));
                // `i` is an index into `s`, which holds `sep` from there: no wrap.
                start = i.saturating_add(sep.len());
            }
            _ => {}
        }
    }
    parts.extend(s.get(start..));
    parts
}

/// Parses a configuration description (`stage(key=value, …) | stage(…) | …`), or `None` if it
/// does not have that shape.
pub(super) fn parse_description(description: &str) -> Option<Vec<DescribedStage<'_>>> {
    split_top(description, " | ")
        .into_iter()
        .map(|stage| {
            let (name, rest) = stage.split_once('(')?;
            let body = rest.strip_suffix(')')?;
            let settings = split_top(body, ", ")
                .into_iter()
                .filter(|s| !s.is_empty())
                .map(|s| s.split_once('='))
                .collect::<Option<Vec<_>>>()?;
            Some((name, settings))
        })
        .collect()
}

/// The settings of stage `name`.
pub(super) fn stage<'a, 'b>(
    stages: &'b [DescribedStage<'a>],
    name: &str,
) -> Option<&'b [(&'a str, &'a str)]> {
    stages
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| s.as_slice())
}

/// The value of setting `key`.
pub(super) fn setting<'a>(settings: &[(&'a str, &'a str)], key: &str) -> Option<&'a str> {
    settings.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

/// The settings that differ between two configuration descriptions, one per line part:
/// `stage.key: checkpoint A, this loader B`, joined by `; `. A stage present on one side only is
/// `stage: checkpoint off, this loader on (…)`. `None` if either description cannot be parsed
/// or no difference is found that way (the caller then quotes both descriptions).
pub(crate) fn describe_differences(checkpoint: &str, this: &str) -> Option<String> {
    let ours = parse_description(checkpoint)?;
    let theirs = parse_description(this)?;
    let settings = |s: &[(&str, &str)]| {
        s.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = Vec::new();
    let mut names: Vec<&str> = ours.iter().map(|(n, _)| *n).collect();
    for (n, _) in &theirs {
        if !names.contains(n) {
            names.push(n);
        }
    }
    for name in names {
        match (stage(&ours, name), stage(&theirs, name)) {
            (Some(a), Some(b)) => {
                let mut keys: Vec<&str> = a.iter().map(|(k, _)| *k).collect();
                for (k, _) in b {
                    if !keys.contains(k) {
                        keys.push(k);
                    }
                }
                for key in keys {
                    let (x, y) = (setting(a, key), setting(b, key));
                    if x != y {
                        out.push(format!(
                            "{name}.{key}: checkpoint {}, this loader {}",
                            x.unwrap_or("(absent)"),
                            y.unwrap_or("(absent)")
                        ));
                    }
                }
            }
            (Some(a), None) => out.push(format!(
                "{name}: checkpoint on ({}), this loader off",
                settings(a)
            )),
            (None, Some(b)) => out.push(format!(
                "{name}: checkpoint off, this loader on ({})",
                settings(b)
            )),
            (None, None) => {}
        }
    }
    (!out.is_empty()).then(|| out.join("; "))
}
