//! Ranks as messages name them: `rank 5`, `ranks 0-3, 7`, `1 rank`, `8 ranks`. Every report,
//! error and progress line of the toolkit that names ranks goes through these, so that a failure
//! of 256 ranks reads `ranks 0-255` and one rank is never `1 ranks`.

/// A list of ranks, sorted, without duplicates, with runs of four or more consecutive ranks
/// written as ranges: `0-3, 7`, `0-255`; shorter runs read as well listed: `0, 1, 2, 5`.
/// Empty for no ranks.
pub fn rank_list(ranks: &[usize]) -> String {
    let mut sorted = ranks.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut rest = sorted.as_slice();
    while let [first, ..] = rest {
        // The run of consecutive ranks that starts at `first`.
        let len = rest
            .iter()
            .enumerate()
            .take_while(|&(i, &r)| r == first + i)
            .count();
        let last = rest[len - 1];
        if len >= 4 {
            parts.push(format!("{first}-{last}"));
        } else {
            parts.extend(rest[..len].iter().map(usize::to_string));
        }
        rest = &rest[len..];
    }
    parts.join(", ")
}

/// `rank 5`, `ranks 0-3, 7` (see [`rank_list`]), or `no ranks` for an empty list. Input order
/// and duplicates do not matter.
pub fn describe_ranks(ranks: &[usize]) -> String {
    let mut distinct = ranks.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    match distinct.as_slice() {
        [] => "no ranks".to_string(),
        [one] => format!("rank {one}"),
        many => format!("ranks {}", rank_list(many)),
    }
}

/// A number of ranks with its noun: `1 rank`, `0 ranks`, `8 ranks`.
pub fn count_ranks(n: usize) -> String {
    if n == 1 {
        "1 rank".to_string()
    } else {
        format!("{n} ranks")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty() {
        assert_eq!(rank_list(&[]), "");
        assert_eq!(describe_ranks(&[]), "no ranks");
    }

    #[test]
    fn single() {
        assert_eq!(rank_list(&[5]), "5");
        assert_eq!(describe_ranks(&[5]), "rank 5");
        assert_eq!(describe_ranks(&[0]), "rank 0");
    }

    #[test]
    fn ranges() {
        let all: Vec<usize> = (0..256).collect();
        assert_eq!(describe_ranks(&all), "ranks 0-255");
        assert_eq!(describe_ranks(&[0, 1, 2, 3]), "ranks 0-3");
        assert_eq!(describe_ranks(&[4, 5, 6, 7, 8]), "ranks 4-8");
    }

    #[test]
    fn gaps() {
        assert_eq!(describe_ranks(&[0, 1, 2, 3, 7]), "ranks 0-3, 7");
        assert_eq!(describe_ranks(&[1, 3]), "ranks 1, 3");
        // Two or three neighbours read as well listed as a range.
        assert_eq!(describe_ranks(&[0, 1, 3]), "ranks 0, 1, 3");
        assert_eq!(describe_ranks(&[0, 1, 2]), "ranks 0, 1, 2");
        assert_eq!(
            describe_ranks(&[0, 2, 3, 4, 6, 7, 10, 11, 12, 13, 255]),
            "ranks 0, 2, 3, 4, 6, 7, 10-13, 255"
        );
    }

    #[test]
    fn unsorted_and_duplicated_input() {
        assert_eq!(describe_ranks(&[3, 1, 2, 0, 7]), "ranks 0-3, 7");
        assert_eq!(describe_ranks(&[2, 0, 3]), "ranks 0, 2, 3");
        assert_eq!(describe_ranks(&[4, 4, 4]), "rank 4");
        assert_eq!(describe_ranks(&[1, 0, 3, 1, 2, 0]), "ranks 0-3");
        assert_eq!(rank_list(&[9, 8, 8, 7, 6]), "6-9");
    }

    #[test]
    fn counts() {
        assert_eq!(count_ranks(0), "0 ranks");
        assert_eq!(count_ranks(1), "1 rank");
        assert_eq!(count_ranks(2), "2 ranks");
        assert_eq!(count_ranks(256), "256 ranks");
    }
}
