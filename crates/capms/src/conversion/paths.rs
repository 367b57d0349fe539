//! Field paths of capms's schema said in the Go provider's: admission reviews a `v1alpha1`
//! object in `v1alpha4` (the apiserver converts it for the webhook), and its messages then name
//! the fields as the person who wrote the object knows them.

use super::Schema;
use super::engine::dotted;
use super::kinds::ConvertedKind;

/// `message` with every field path of kind `kind` in capms's schema replaced by the same
/// field's path in `schema` (unchanged for capms's own schema and for fields the other schema
/// lacks). A path is replaced only as a whole: at the start of a word, followed by no further
/// letter of a name.
pub(crate) fn in_schema(kind: &str, schema: Schema, message: &str) -> String {
    let Some(kind) = ConvertedKind::named(kind).filter(|_| schema != Schema::Capms) else {
        return message.to_owned();
    };
    let mut renames: Vec<(String, String)> = kind
        .fields()
        .filter_map(|f| Some((dotted(f.capms?), dotted(f.path(schema)?))))
        .filter(|(from, to)| from != to)
        .collect();
    // The longest first, so that a path wins over one it starts with.
    renames.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
    let name_char = |c: char| c.is_ascii_alphanumeric() || c == '.' || c == '_';
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    let mut after_name = false;
    while let Some(c) = rest.chars().next() {
        let found = (!after_name)
            .then(|| {
                renames.iter().find(|(from, _)| {
                    rest.starts_with(from.as_str())
                        && !rest[from.len()..]
                            .chars()
                            .next()
                            .is_some_and(|n| n.is_ascii_alphanumeric() || n == '_')
                })
            })
            .flatten();
        match found {
            Some((from, to)) => {
                out.push_str(to);
                rest = &rest[from.len()..];
                after_name = true;
            }
            None => {
                out.push(c);
                rest = &rest[c.len_utf8()..];
                after_name = name_char(c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_renamed_whole_and_only_for_the_go_provider() {
        let message = "spec.machineType: machine type \"x\" is not a metal-stack size; spec.machineTypeX stays; see spec.privateNetworkID";
        assert_eq!(
            in_schema("MetalStackMachine", Schema::GoProvider, message),
            "spec.size: machine type \"x\" is not a metal-stack size; spec.machineTypeX stays; see spec.privateNetworkID"
        );
        assert_eq!(
            in_schema("MetalStackMachine", Schema::Capms, message),
            message
        );
        assert_eq!(
            in_schema(
                "MetalStackCluster",
                Schema::GoProvider,
                "spec.privateNetworkID: network \"n\" does not exist"
            ),
            "spec.nodeNetworkID: network \"n\" does not exist"
        );
        assert_eq!(
            in_schema(
                "MetalStackFirewallTemplate",
                Schema::GoProvider,
                "spec.template.spec.rules.egress[0].ports: bad; spec.template.spec.image: unknown"
            ),
            "spec.initialRuleSet.egress[0].ports: bad; spec.image: unknown"
        );
        assert_eq!(
            in_schema(
                "MetalStackMachineTemplate",
                Schema::GoProvider,
                "x.spec.template.spec.machineType is not renamed inside another name"
            ),
            "x.spec.template.spec.machineType is not renamed inside another name"
        );
    }
}
