//! Whether concurrent scale requests were each applied exactly once or not at all. A request
//! answered with success must have been applied once; one answered with a failure, not at all;
//! one whose client hung up before its answer either. Each applied request is one write of the
//! job's spec (its generation grows by one), so the final desired count and the number of writes
//! must both be explained by the accepted requests plus one subset of the hung-up ones.

use std::collections::BTreeMap;

/// The requests of a run by outcome, each by the number of collectors it adds.
#[derive(Clone, Debug, Default)]
pub struct Requests {
    pub accepted: Vec<i64>,
    pub refused: Vec<i64>,
    /// The client hung up before its answer: applied or not, either is right.
    pub dropped: Vec<i64>,
}

/// How the job ended up: its desired count before and after, and the spec writes in between.
#[derive(Clone, Copy, Debug)]
pub struct Observed {
    pub initial: i64,
    pub last: i64,
    pub writes: i64,
}

/// The indices (into `dropped`) of the hung-up requests that were applied, when the outcome is
/// consistent with exactly-once; otherwise what cannot be explained.
pub fn explain(requests: &Requests, observed: Observed) -> Result<Vec<usize>, String> {
    let accepted: i64 = requests.accepted.iter().sum();
    let rest = observed.last - observed.initial - accepted;
    let extra_writes = observed.writes - requests.accepted.len() as i64;
    if extra_writes < 0 {
        return Err(format!(
            "{} requests were answered with success but the job was written {} times: some success was never applied",
            requests.accepted.len(),
            observed.writes
        ));
    }
    // Every subset of the dropped requests by (how many, how much they add): the first found.
    let mut reachable: BTreeMap<(i64, i64), Vec<usize>> = BTreeMap::from([((0, 0), vec![])]);
    for (i, add) in requests.dropped.iter().enumerate() {
        let before: Vec<_> = reachable.iter().map(|(k, v)| (*k, v.clone())).collect();
        for ((count, sum), mut chosen) in before {
            chosen.push(i);
            reachable.entry((count + 1, sum + add)).or_insert(chosen);
        }
    }
    reachable.remove(&(extra_writes, rest)).ok_or_else(|| {
        format!(
            "desired {} = {} initial + {accepted} accepted + {rest}, in {} writes for {} accepted requests: \
             no subset of the {} hung-up requests adds {rest} in {extra_writes} writes",
            observed.last,
            observed.initial,
            observed.writes,
            requests.accepted.len(),
            requests.dropped.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requests(accepted: &[i64], dropped: &[i64]) -> Requests {
        Requests { accepted: accepted.to_vec(), refused: vec![], dropped: dropped.to_vec() }
    }

    #[test]
    fn every_answered_request_applied_once_is_consistent() {
        let r = requests(&[1, 2, 3], &[]);
        assert_eq!(explain(&r, Observed { initial: 2, last: 8, writes: 3 }), Ok(vec![]));
    }

    #[test]
    fn the_dropped_requests_that_were_applied_are_named() {
        let r = requests(&[1], &[2, 3, 1]);
        let applied = explain(&r, Observed { initial: 0, last: 4, writes: 2 }).unwrap();
        assert_eq!(applied, vec![1], "only the +3 adds 3 in one write");
        assert_eq!(explain(&r, Observed { initial: 0, last: 4, writes: 3 }).unwrap(), vec![0, 2]);
    }

    #[test]
    fn a_lost_or_doubled_request_is_not() {
        let r = requests(&[1, 2], &[3]);
        // A success that never landed.
        assert!(explain(&r, Observed { initial: 0, last: 2, writes: 1 }).is_err());
        // A request applied twice: one write too many for what it adds.
        assert!(explain(&r, Observed { initial: 0, last: 5, writes: 3 }).is_err());
        // A refused request that was applied anyway looks like a sum nobody explains.
        let refused = Requests { refused: vec![5], ..requests(&[1], &[]) };
        assert!(explain(&refused, Observed { initial: 0, last: 6, writes: 2 }).is_err());
    }
}
