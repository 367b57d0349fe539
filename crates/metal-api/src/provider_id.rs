//! The providerID of a metal-stack machine, as Kubernetes Nodes and Cluster API Machines carry
//! it: `metal://<partition>/<uuid>` (what metal-ccm sets on Nodes) or `metalstack://<uuid>` (the
//! first metal-stack provider's form).

/// A machine's providerID, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderId {
    pub partition: Option<String>,
    pub machine_id: String,
}

/// A text that is no providerID of a metal-stack machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is neither metalstack://<uuid> nor metal://<partition>/<uuid>")]
pub struct Invalid(pub String);

impl ProviderId {
    /// Either form; the machine id must look like a UUID.
    pub fn parse(text: &str) -> Result<ProviderId, Invalid> {
        let invalid = || Invalid(text.to_owned());
        let (partition, machine_id) = match text.strip_prefix("metalstack://") {
            Some(id) => (None, id),
            None => {
                let rest = text.strip_prefix("metal://").ok_or_else(invalid)?;
                let (partition, id) = rest.split_once('/').ok_or_else(invalid)?;
                if partition.is_empty() {
                    return Err(invalid());
                }
                (Some(partition.to_owned()), id)
            }
        };
        if !is_uuid(machine_id) {
            return Err(invalid());
        }
        Ok(ProviderId {
            partition,
            machine_id: machine_id.to_owned(),
        })
    }

    /// The form metal-ccm writes: `metal://<partition>/<uuid>`.
    pub fn format(partition: &str, machine_id: &str) -> String {
        format!("metal://{partition}/{machine_id}")
    }
}

/// 8-4-4-4-12 hexadecimal digits, as metal-api's machine ids are.
fn is_uuid(text: &str) -> bool {
    text.len() == 36
        && text.char_indices().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_in_both_forms() {
        let seed = ProviderId::parse("metalstack://e0ab02d2-27cd-5a5e-8efc-080ba80cf258");
        assert_eq!(
            seed.map(|p| (p.partition, p.machine_id)),
            Ok((None, "e0ab02d2-27cd-5a5e-8efc-080ba80cf258".to_owned()))
        );
        let ours = ProviderId::parse("metal://vagrant/e0ab02d2-27cd-5a5e-8efc-080ba80cf258");
        assert_eq!(ours.map(|p| p.partition), Ok(Some("vagrant".to_owned())));
        for bad in [
            "metal:///e0ab02d2-27cd-5a5e-8efc-080ba80cf258",
            "metal://p/xyz",
            "aws://x",
            "metalstack://e0ab02d2",
        ] {
            assert_eq!(
                ProviderId::parse(bad),
                Err(Invalid(bad.to_owned())),
                "{bad}"
            );
        }
        assert_eq!(ProviderId::format("p", "id"), "metal://p/id");
        assert_eq!(
            Invalid("aws://x".into()).to_string(),
            "\"aws://x\" is neither metalstack://<uuid> nor metal://<partition>/<uuid>"
        );
    }
}
