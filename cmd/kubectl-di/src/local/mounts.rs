//! The volumes a local process gets, decided without I/O. A process cannot have a directory
//! mounted at the template's `mountPath` without privileges, so each volume a local run can
//! provide is a directory of this machine, and the mount path is rewritten to it wherever the
//! container's command, arguments or environment name it:
//! - `emptyDir`: a directory of the replica's own, `<run dir>/volumes/<pod>/<volume>`;
//! - `hostPath`: the host path itself;
//! - `configMap`: when the ConfigMap is in the same file as the job, its keys as files under
//!   `<run dir>/configmaps/<name>`.
//!
//! Anything else, and a path the program finds by itself rather than from its command or
//! environment, is named in a warning.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, PodSpec, Volume};

/// The ConfigMaps of the job's file: name to data.
pub type ConfigMaps = BTreeMap<String, BTreeMap<String, String>>;

/// What a replica's volumes need before it starts, and how its paths read locally.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mounts {
    /// Directories to create (emptyDirs).
    pub dirs: Vec<PathBuf>,
    /// Files to write (ConfigMap keys), with their contents.
    pub files: Vec<(PathBuf, String)>,
    /// Mount path to local path.
    pub paths: Vec<(String, String)>,
}

/// The mounts of `container` (of pod `pod` with `spec`), and a warning for each it cannot have.
pub fn mounts(
    pod: &str,
    spec: &PodSpec,
    container: &Container,
    run_dir: &Path,
    config_maps: &ConfigMaps,
    warn: &mut dyn FnMut(String),
) -> Mounts {
    let mut out = Mounts::default();
    for mount in container.volume_mounts.iter().flatten() {
        let volume = spec.volumes.iter().flatten().find(|v| v.name == mount.name);
        let Some(root) = volume.and_then(|v| local_root(pod, v, run_dir, config_maps, &mut out, warn)) else {
            continue;
        };
        let local = match mount.sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(sub) => root.join(sub),
            None => root,
        };
        out.paths.push((mount.mount_path.trim_end_matches('/').to_owned(), local.display().to_string()));
    }
    if volume_less(container, spec) {
        warn("a volume mount names no volume of the pod; it is not mounted locally".into());
    }
    out
}

/// The local directory behind `volume`, or `None` (warned) when a local run cannot have it.
fn local_root(
    pod: &str,
    volume: &Volume,
    run_dir: &Path,
    config_maps: &ConfigMaps,
    out: &mut Mounts,
    warn: &mut dyn FnMut(String),
) -> Option<PathBuf> {
    if volume.empty_dir.is_some() {
        let dir = run_dir.join("volumes").join(pod).join(&volume.name);
        out.dirs.push(dir.clone());
        return Some(dir);
    }
    if let Some(host) = &volume.host_path {
        return Some(PathBuf::from(&host.path));
    }
    if let Some(source) = &volume.config_map {
        let Some(data) = config_maps.get(&source.name) else {
            if !source.optional.unwrap_or(false) {
                warn(format!(
                    "ConfigMap {} (volume {}) is not in the job's file, so it is not mounted locally; put it in the \
                     file beside the job",
                    source.name, volume.name
                ));
            }
            return None;
        };
        let dir = run_dir.join("configmaps").join(&source.name);
        // `items` picks keys and names their files; without it every key is a file.
        let files: Vec<(String, String)> = match &source.items {
            Some(items) => items.iter().map(|i| (i.key.clone(), i.path.clone())).collect(),
            None => data.keys().map(|k| (k.clone(), k.clone())).collect(),
        };
        for (key, path) in files {
            match data.get(&key) {
                Some(text) => out.files.push((dir.join(path), text.clone())),
                None => warn(format!("ConfigMap {} has no key {key}; its file is missing locally", source.name)),
            }
        }
        return Some(dir);
    }
    warn(format!(
        "volume {} is of a kind local runs do not have (emptyDir, hostPath and a ConfigMap of the same file \
         are); it is not mounted locally",
        volume.name
    ));
    None
}

fn volume_less(container: &Container, spec: &PodSpec) -> bool {
    let volumes = spec.volumes.as_deref().unwrap_or_default();
    container.volume_mounts.iter().flatten().any(|m| !volumes.iter().any(|v| v.name == m.name))
}

/// `value` with every mount path it names, as a whole path or a path's first part, turned into
/// its local directory: `/opt/sf/w.py` becomes `<run dir>/configmaps/sf/w.py`, `/opt/sfx` stays.
pub fn rewrite(value: &str, paths: &[(String, String)]) -> String {
    let mut ordered: Vec<&(String, String)> = paths.iter().filter(|(from, _)| !from.is_empty()).collect();
    ordered.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
    let path_char = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
    let mut out = String::with_capacity(value.len());
    let (mut rest, mut before) = (value, None::<char>);
    'scan: while let Some(c) = rest.chars().next() {
        if before.is_none_or(|b| !path_char(b) && b != '/') {
            for (from, to) in &ordered {
                if let Some(after) = rest.strip_prefix(from.as_str())
                    && after.chars().next().is_none_or(|a| !path_char(a))
                {
                    out.push_str(to);
                    (rest, before) = (after, from.chars().last());
                    continue 'scan;
                }
            }
        }
        out.push(c);
        (rest, before) = (&rest[c.len_utf8()..], Some(c));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> Vec<(String, String)> {
        vec![("/opt/sf".into(), "/run/configmaps/sf".into()), ("/data".into(), "/run/volumes/p/data".into())]
    }

    #[test]
    fn a_mount_path_is_rewritten_where_it_starts_a_path() {
        let cases = [
            ("exec python3 /opt/sf/sf_worker.py runner", "exec python3 /run/configmaps/sf/sf_worker.py runner"),
            ("/opt/sf", "/run/configmaps/sf"),
            ("PYTHONPATH=/opt/sf:/data", "PYTHONPATH=/run/configmaps/sf:/run/volumes/p/data"),
            ("/opt/sfx/a", "/opt/sfx/a"),
            ("/x/opt/sf/a", "/x/opt/sf/a"),
            ("--dir=/data/ckpt", "--dir=/run/volumes/p/data/ckpt"),
            ("no paths here", "no paths here"),
        ];
        for (value, want) in cases {
            assert_eq!(rewrite(value, &paths()), want, "{value}");
        }
    }
}
