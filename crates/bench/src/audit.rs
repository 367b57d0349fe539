//! Which write to a MetalStackMachine preceded each of Cluster API's Machine status writes, and
//! each one answered 409 Conflict, from the kube-apiserver's audit log. `make bench` has
//! `tests/scripts/controlplane.sh` write that log (`CAPMS_APISERVER_AUDIT=1`) for the writes to
//! Machines and MetalStackMachines alone.
//!
//! A Machine status write is put down to the last write capms finished on that Machine's
//! MetalStackMachine before the apiserver received it: `record` (the patch naming the machine),
//! `status 1`, `status 2`, `status 3+` (capms's status writes, in order), or `none` (capms had
//! not written to it yet). Each capms write wakes Cluster API's Machine controller, whose cache
//! may still hold the Machine from before its own last write: a conflict put down to a write is
//! a conflict that write's wake-up likely made.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Machine status writes and their conflicts, by the capms write that preceded them.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ConflictCauses {
    /// Machine status writes (every answer), per worker, by preceding capms write.
    pub status_writes_per_worker: BTreeMap<String, f64>,
    /// Those answered 409 Conflict, per worker, by preceding capms write.
    pub conflicts_per_worker: BTreeMap<String, f64>,
    /// capms's writes to MetalStackMachines per worker, by kind (`record`, `status 1`, …).
    pub capms_writes_per_worker: BTreeMap<String, f64>,
}

/// One line of the audit log, as far as it is read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Line {
    stage: String,
    verb: String,
    user: User,
    object_ref: Option<ObjectRef>,
    response_status: Option<ResponseStatus>,
    request_received_timestamp: jiff::Timestamp,
    stage_timestamp: jiff::Timestamp,
}

#[derive(Deserialize)]
struct User {
    username: String,
}

#[derive(Deserialize)]
struct ObjectRef {
    resource: String,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

#[derive(Deserialize)]
struct ResponseStatus {
    code: u16,
}

/// What one run's analysis needs: its namespace, capms's user, each MetalStackMachine's Machine
/// (Machine name → MetalStackMachine name) and the span of provisioning (wall clock).
pub struct Run<'a> {
    pub namespace: &'a str,
    pub capms_user: &'a str,
    pub machines: &'a BTreeMap<String, String>,
    pub span: (jiff::Timestamp, jiff::Timestamp),
    pub workers: usize,
}

/// A write, as far as the analysis tells them apart.
struct Write {
    received: jiff::Timestamp,
    finished: jiff::Timestamp,
    ok: bool,
    conflict: bool,
    status: bool,
}

/// Reads `log` with its rotated parts (None when there is none: the run was not audited).
pub fn analyse(log: &Path, run: &Run) -> Option<ConflictCauses> {
    let text = read_rotated(log)?;
    let (mut capms, mut capi) = (BTreeMap::<String, Vec<Write>>::new(), Vec::new());
    for line in text.lines() {
        let Ok(line) = serde_json::from_str::<Line>(line) else {
            continue;
        };
        let Some((resource, name, write)) = relevant(&line, run) else {
            continue;
        };
        match resource.as_str() {
            "metalstackmachines" if line.user.username == run.capms_user && write.ok => {
                capms.entry(name).or_default().push(write)
            }
            "machines" if write.status => capi.push((name, write)),
            _ => {}
        }
    }
    let labelled: BTreeMap<String, Vec<(jiff::Timestamp, String)>> =
        capms.into_iter().map(|(n, w)| (n, labels(w))).collect();
    let per_worker = |counts: BTreeMap<String, usize>| {
        let workers = run.workers.max(1) as f64;
        counts
            .into_iter()
            .map(|(k, v)| (k, v as f64 / workers))
            .collect()
    };
    let (mut writes, mut conflicts) = (BTreeMap::new(), BTreeMap::new());
    for (machine, write) in capi {
        let msm = run.machines.get(&machine);
        let before = msm.and_then(|m| labelled.get(m)).and_then(|ws| {
            let done = ws.iter().take_while(|(t, _)| *t <= write.received);
            done.last().map(|(_, label)| label.clone())
        });
        let label = before.unwrap_or_else(|| "none".into());
        *writes.entry(label.clone()).or_default() += 1;
        if write.conflict {
            *conflicts.entry(label).or_default() += 1;
        }
    }
    let mut by_kind = BTreeMap::new();
    for (_, label) in labelled.values().flatten() {
        *by_kind.entry(label.clone()).or_default() += 1;
    }
    Some(ConflictCauses {
        status_writes_per_worker: per_worker(writes),
        conflicts_per_worker: per_worker(conflicts),
        capms_writes_per_worker: per_worker(by_kind),
    })
}

/// The text of `log` (`DIR/NAME.EXT`), after that of the parts the apiserver rotated out of it
/// (`DIR/NAME-<time>.EXT`, oldest first); None without `log`.
fn read_rotated(log: &Path) -> Option<String> {
    let (dir, stem) = (log.parent()?, log.file_stem()?.to_str()?);
    let ext = log.extension().and_then(|e| e.to_str()).unwrap_or_default();
    let prefix = format!("{stem}-");
    let mut parts: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix) && n.ends_with(&format!(".{ext}")))
        .collect();
    // The rotated parts' names carry their time, so that their order is the name's.
    parts.sort();
    let mut text = String::new();
    for part in &parts {
        text.push_str(&std::fs::read_to_string(dir.join(part)).ok()?);
        text.push('\n');
    }
    text.push_str(&std::fs::read_to_string(log).ok()?);
    Some(text)
}

/// The write of `line` to a Machine or MetalStackMachine of the run, within its span.
fn relevant(line: &Line, run: &Run) -> Option<(String, String, Write)> {
    let object = line.object_ref.as_ref()?;
    let in_span = line.request_received_timestamp >= run.span.0
        && line.request_received_timestamp <= run.span.1;
    let write = ["create", "update", "patch"].contains(&line.verb.as_str());
    if line.stage != "ResponseComplete"
        || !write
        || !in_span
        || object.namespace.as_deref() != Some(run.namespace)
    {
        return None;
    }
    let code = line.response_status.as_ref().map_or(0, |s| s.code);
    let write = Write {
        received: line.request_received_timestamp,
        finished: line.stage_timestamp,
        ok: (200..300).contains(&code),
        conflict: code == 409,
        status: object.subresource.as_deref() == Some("status"),
    };
    Some((object.resource.clone(), object.name.clone()?, write))
}

/// capms's writes to one object in order, each with when it finished and its label.
fn labels(mut writes: Vec<Write>) -> Vec<(jiff::Timestamp, String)> {
    writes.sort_by_key(|w| w.finished);
    let mut statuses = 0;
    let label = |w: &Write, statuses: &mut usize| match w.status {
        false => "record".to_owned(),
        true => {
            *statuses += 1;
            match *statuses {
                n @ 1..=2 => format!("status {n}"),
                _ => "status 3+".to_owned(),
            }
        }
    };
    writes
        .iter()
        .map(|w| (w.finished, label(w, &mut statuses)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(at: &str, user: &str, resource: &str, sub: &str, name: &str, code: u16) -> String {
        serde_json::json!({
            "stage": "ResponseComplete", "verb": "patch", "user": {"username": user},
            "objectRef": {"resource": resource, "namespace": "ns", "name": name,
                          "subresource": (!sub.is_empty()).then_some(sub)},
            "responseStatus": {"code": code},
            "requestReceivedTimestamp": at, "stageTimestamp": at,
        })
        .to_string()
    }

    #[test]
    fn each_machine_status_write_is_put_down_to_the_capms_write_before_it() {
        let t = |s: u32| format!("2026-11-28T10:00:{s:02}.000000Z");
        let lines = [
            line(&t(1), "capi", "machines", "status", "m-1", 200),
            line(&t(2), "capms-ns", "metalstackmachines", "", "w-1", 200),
            line(&t(3), "capi", "machines", "status", "m-1", 409),
            line(
                &t(4),
                "capms-ns",
                "metalstackmachines",
                "status",
                "w-1",
                409,
            ),
            line(
                &t(5),
                "capms-ns",
                "metalstackmachines",
                "status",
                "w-1",
                200,
            ),
            line(&t(6), "capi", "machines", "status", "m-1", 409),
            line(
                &t(7),
                "capms-ns",
                "metalstackmachines",
                "status",
                "w-1",
                200,
            ),
            line(&t(8), "capi", "machines", "status", "m-1", 200),
            line(&t(9), "capi", "machines", "status", "m-2", 409),
            line(&t(59), "capi", "machines", "status", "m-1", 409),
        ];
        let dir = std::env::temp_dir().join(format!("capms-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let log = dir.join("audit.log");
        std::fs::write(&log, lines.join("\n")).expect("log");
        let machines = [("m-1".to_owned(), "w-1".to_owned())].into();
        let at = |s: u32| t(s).parse().expect("time");
        let run = Run {
            namespace: "ns",
            capms_user: "capms-ns",
            machines: &machines,
            span: (at(0), at(30)),
            workers: 2,
        };
        let causes = analyse(&log, &run).expect("analysed");
        let halves = |pairs: &[(&str, f64)]| -> BTreeMap<String, f64> {
            pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        assert_eq!(
            causes.conflicts_per_worker,
            halves(&[("none", 0.5), ("record", 0.5), ("status 1", 0.5)]),
            "the refused status write is not capms's first; the one after the span is left out"
        );
        assert_eq!(
            causes.status_writes_per_worker,
            halves(&[
                ("none", 1.0),
                ("record", 0.5),
                ("status 1", 0.5),
                ("status 2", 0.5)
            ])
        );
        assert_eq!(
            causes.capms_writes_per_worker,
            halves(&[("record", 0.5), ("status 1", 0.5), ("status 2", 0.5)])
        );
        // The same, with its first half rotated out (as kube-apiserver names the part).
        let (older, newer) = lines.split_at(5);
        let rotated = dir.join("audit-2026-11-28T10-00-05.000.log");
        std::fs::write(&rotated, older.join("\n")).expect("rotated part");
        std::fs::write(&log, newer.join("\n")).expect("log");
        let again = analyse(&log, &run).expect("analysed");
        assert_eq!(
            again.status_writes_per_worker, causes.status_writes_per_worker,
            "the rotated part is read too"
        );
        assert_eq!(again.conflicts_per_worker, causes.conflicts_per_worker);
        let _ = std::fs::remove_dir_all(dir);
    }
}
