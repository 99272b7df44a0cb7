//! The one line a rank writes when it gives up on other ranks, a witness of their failure and
//! not its culprit: which ranks it waited for in vain, which one it saw go, and during what.
//! symmem-bootstrap writes it where it returns such a failure ([`Witness::line`]); launchers
//! read it ([`Witness::parse`]) instead of the messages' English, which may change.
//!
//! `symmem-witness: rank=1 accused=2,3 gone=3@node-b during=#5 barrier`: the witness's rank,
//! the ranks it waited for (empty: it cannot say), the rank it saw go with its node where known
//! (`-`: none), then what it was doing, to the end of the line.

/// What starts a witness's line, wherever a launcher's tags put it in the line.
pub const WITNESS_PREFIX: &str = "symmem-witness: ";

/// One witness's facts (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Witness {
    /// The rank that writes it.
    pub rank: usize,
    /// The ranks it waited for in vain, or saw go.
    pub accused: Vec<usize>,
    /// The rank it saw go away (its process ended, or its node was cut off), with its node
    /// where known.
    pub gone: Option<(usize, Option<String>)>,
    /// The collective or start-up step it gave up in, for people.
    pub during: String,
}

impl Witness {
    /// The line, without a newline.
    pub fn line(&self) -> String {
        let accused: Vec<String> = self.accused.iter().map(ToString::to_string).collect();
        let gone = match &self.gone {
            None => "-".to_string(),
            Some((rank, None)) => rank.to_string(),
            Some((rank, Some(node))) => format!("{rank}@{node}"),
        };
        let during = self.during.replace(['\n', '\r'], " ");
        format!(
            "{WITNESS_PREFIX}rank={} accused={} gone={gone} during={during}",
            self.rank,
            accused.join(",")
        )
    }

    /// The witness a line holds, wherever its prefix starts; `None` for any other line.
    pub fn parse(text: &str) -> Option<Self> {
        let (_, rest) = text.split_once(WITNESS_PREFIX)?;
        let rest = rest.strip_prefix("rank=")?;
        let (rank, rest) = rest.split_once(" accused=")?;
        let (accused, rest) = rest.split_once(" gone=")?;
        let (gone, during) = rest.split_once(" during=")?;
        let accused = match accused {
            "" => Vec::new(),
            list => list
                .split(',')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?,
        };
        let gone = match gone {
            "-" => None,
            seen => {
                let (rank, node) = match seen.split_once('@') {
                    Some((rank, node)) => (rank, Some(node.to_string())),
                    None => (seen, None),
                };
                Some((rank.parse().ok()?, node))
            }
        };
        Some(Self {
            rank: rank.parse().ok()?,
            accused,
            gone,
            during: during.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_reads_back_as_it_was_written() {
        let witnesses = [
            Witness {
                rank: 1,
                accused: vec![2, 3],
                gone: Some((3, Some("node-b".into()))),
                during: "collective #5 barrier".into(),
            },
            Witness {
                rank: 0,
                accused: vec![],
                gone: None,
                during: "the rendezvous".into(),
            },
            Witness {
                rank: 7,
                accused: vec![4],
                gone: Some((4, None)),
                during: "collective #9 free(allocation #2, 64 B)".into(),
            },
        ];
        for witness in witnesses {
            let tagged = format!("[1,{}]<stderr>:{}", witness.rank, witness.line());
            assert_eq!(Witness::parse(&tagged), Some(witness.clone()), "{tagged}");
        }
    }

    #[test]
    fn other_lines_are_no_witness() {
        for text in [
            "check 5 passed",
            "rank 3 never arrived at collective #5 barrier within 10s",
            "symmem-witness: rank=x accused= gone=- during=y",
            "symmem-witness: rank=1 accused=2,a gone=- during=y",
        ] {
            assert_eq!(Witness::parse(text), None, "{text}");
        }
    }

    #[test]
    fn a_newline_in_the_step_stays_on_one_line() {
        let witness = Witness {
            rank: 2,
            during: "two\nlines".into(),
            ..Witness::default()
        };
        assert!(!witness.line().contains('\n'));
    }
}
