//! What a run prints: the per-fault table, the summary by fault and the
//! last line.

use super::*;

/// The table as Markdown.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| fault | grants | Indeterminate | Busy | timeouts (T) | unavailable/other | fence refusals | recovery ms | longest gap ms |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let rec = r.recovery_ms.map_or("—".to_owned(), |m| m.to_string());
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.fault,
            r.grants,
            r.indeterminate,
            r.busy,
            r.timeouts,
            r.unavailable,
            r.fence_refusals,
            rec,
            r.longest_gap_ms
        );
    }
    s
}

/// The rows summed per fault kind (count, sums; worst recovery and gap),
/// in order of first appearance: the soak's summary.
pub fn by_fault(rows: &[Row]) -> String {
    let mut kinds: Vec<(String, u64, Row)> = Vec::new();
    for r in rows {
        let i = match kinds.iter().position(|(k, _, _)| *k == r.fault) {
            Some(i) => i,
            None => {
                kinds.push((r.fault.clone(), 0, Row { fault: r.fault.clone(), ..Row::default() }));
                kinds.len() - 1
            }
        };
        let (_, n, a) = &mut kinds[i];
        *n += 1;
        a.grants += r.grants;
        a.indeterminate += r.indeterminate;
        a.busy += r.busy;
        a.timeouts += r.timeouts;
        a.unavailable += r.unavailable;
        a.fence_refusals += r.fence_refusals;
        a.recovery_ms = a.recovery_ms.max(r.recovery_ms);
        a.longest_gap_ms = a.longest_gap_ms.max(r.longest_gap_ms);
    }
    let mut s = String::from(
        "| fault | times | grants | Indeterminate | Busy | timeouts (T) | unavailable/other | fence refusals | worst recovery ms | longest gap ms |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (k, n, a) in kinds {
        let rec = a.recovery_ms.map_or("—".to_owned(), |m| m.to_string());
        let _ = writeln!(
            s,
            "| {k} | {n} | {} | {} | {} | {} | {} | {} | {rec} | {} |",
            a.grants, a.indeterminate, a.busy, a.timeouts, a.unavailable, a.fence_refusals, a.longest_gap_ms
        );
    }
    s
}

/// The checker's last line, exactly.
pub fn last_line(violations: u64, grants: u64, faults: u64, fence_refusals: u64, indeterminate_held: u64) -> String {
    format!(
        "violations={violations} grants={grants} faults={faults} fence_refusals={fence_refusals} \
         indeterminate_held={indeterminate_held}"
    )
}
