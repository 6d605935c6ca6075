//! Whose a policy a scoped answer announces is: its scope's (an account's own limit) or the
//! whole gate's (a limit of the key every scope's calls share), as the answers show it.
//!
//! A server that keeps both announces both in the answer to one account's call. The IETF
//! draft names each policy and may give each a partition key (`pk`): whose count it is. A
//! policy whose key is the same in the answers to two scopes' calls counts them together, and
//! is the gate's; one whose key differs counts each scope apart, and is the scope's. Until a
//! second scope's answer shows which, a policy is taken as both, on the safe side: the gate
//! keeps to it as if every scope's calls counted in it, and the scope too. A policy without a
//! name or a key is the scope's, as the answer was; the user may say whose any policy is
//! ([`GateBuilder::policy_of`](crate::GateBuilder::policy_of)).
//!
//! Pure: a small table the core keeps, asked once per announcement.

use super::classify::Scope;

/// Whose a policy is, as the user tells it: see
/// [`GateBuilder::policy_of`](crate::GateBuilder::policy_of).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicyOf {
    /// A limit of the whole key: every scope's calls count in it.
    Gate,
    /// A limit of each scope apart.
    Scope,
}

/// Whose an announcement of a scoped answer is taken to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Whose {
    /// The scope's alone.
    Scope,
    /// The gate's alone.
    Gate,
    /// Not known yet: the gate's and the scope's.
    Both,
}

/// What the answers have shown of a policy.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    /// Told by the user, or shown by two scopes' answers.
    Known(PolicyOf),
    /// Only in the answers to one scope's calls, with this key.
    Once(Scope, Vec<u8>),
}

/// The policies whose owner the answers or the user told.
#[derive(Debug, Default)]
pub(crate) struct Partitions {
    seen: Vec<(String, Seen)>,
}

/// The most policies kept: a server announces a few.
const KEPT: usize = 64;

impl Partitions {
    /// The user says `policy` is `of`.
    pub(crate) fn tell(&mut self, policy: String, of: PolicyOf) {
        self.seen.retain(|(name, _)| *name != policy);
        self.seen.push((policy, Seen::Known(of)));
    }

    /// Whose the announcement of `policy` with the partition key `partition`, in the answer
    /// to a call of `scope`, is; and whether this answer showed it (it was not known before).
    pub(crate) fn whose(
        &mut self,
        scope: &Scope,
        (policy, partition): (Option<&str>, Option<&[u8]>),
    ) -> (Whose, bool) {
        let Some(policy) = policy else {
            return (Whose::Scope, false);
        };
        let known = self.seen.iter_mut().find(|(name, _)| name == policy);
        let Some((_, seen)) = known else {
            let Some(key) = partition else {
                return (Whose::Scope, false);
            };
            if self.seen.len() < KEPT {
                let once = Seen::Once(scope.clone(), key.to_vec());
                self.seen.push((policy.to_owned(), once));
            }
            return (Whose::Both, false);
        };
        match seen {
            Seen::Known(PolicyOf::Gate) => (Whose::Gate, false),
            Seen::Known(PolicyOf::Scope) => (Whose::Scope, false),
            Seen::Once(first, key) => match partition {
                Some(this) if first != scope => {
                    let of = if this == key.as_slice() {
                        PolicyOf::Gate
                    } else {
                        PolicyOf::Scope
                    };
                    *seen = Seen::Known(of);
                    let whose = match of {
                        PolicyOf::Gate => Whose::Gate,
                        PolicyOf::Scope => Whose::Scope,
                    };
                    (whose, true)
                }
                _ => (Whose::Both, false),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_shared_by_two_scopes_is_the_gates_and_one_that_differs_each_scopes() {
        let mut partitions = Partitions::default();
        let (a, b) = (Scope::from("a"), Scope::from("b"));
        let whole = (Some("whole"), Some(&b"key"[..]));
        // Seen with one scope only: both, on the safe side, however often.
        assert_eq!(partitions.whose(&a, whole), (Whose::Both, false));
        assert_eq!(partitions.whose(&a, whole), (Whose::Both, false));
        // Another scope's answer with the same key: the gate's, from then on.
        assert_eq!(partitions.whose(&b, whole), (Whose::Gate, true));
        assert_eq!(partitions.whose(&a, whole), (Whose::Gate, false));
        // Keys that differ: each scope's.
        let of = |key: &'static [u8]| (Some("account"), Some(key));
        assert_eq!(partitions.whose(&a, of(b"a")), (Whose::Both, false));
        assert_eq!(partitions.whose(&b, of(b"b")), (Whose::Scope, true));
        assert_eq!(partitions.whose(&a, of(b"a")), (Whose::Scope, false));
    }

    #[test]
    fn at_most_kept_policies_are_learnt() {
        // A server naming policies without end (a name of each account) takes no more of
        // the gate's memory than `KEPT` of them: the last kept is learnt, the next is not.
        let mut partitions = Partitions::default();
        let (a, b) = (Scope::from("a"), Scope::from("b"));
        let names: Vec<String> = (0..=KEPT).map(|i| format!("p{i}")).collect();
        for name in &names {
            partitions.whose(&a, (Some(name), Some(b"k")));
        }
        let last_kept = (Some(names[KEPT - 1].as_str()), Some(&b"k"[..]));
        assert_eq!(partitions.whose(&b, last_kept), (Whose::Gate, true));
        let past = (Some(names[KEPT].as_str()), Some(&b"k"[..]));
        assert_eq!(partitions.whose(&b, past), (Whose::Both, false));
    }

    #[test]
    fn a_policy_without_a_name_or_a_key_is_the_scopes_and_the_user_may_say_otherwise() {
        let mut partitions = Partitions::default();
        let a = Scope::from("a");
        assert_eq!(
            partitions.whose(&a, (None, Some(b"k"))),
            (Whose::Scope, false)
        );
        assert_eq!(
            partitions.whose(&a, (Some("p"), None)),
            (Whose::Scope, false)
        );
        partitions.tell("p".to_owned(), PolicyOf::Gate);
        assert_eq!(
            partitions.whose(&a, (Some("p"), None)),
            (Whose::Gate, false)
        );
        partitions.tell("p".to_owned(), PolicyOf::Scope);
        assert_eq!(
            partitions.whose(&a, (Some("p"), Some(b"k"))),
            (Whose::Scope, false)
        );
    }
}
