//! The racks a cluster reports as failure domains follow what observe read, and stay as they
//! were when metal-api's machines could not be read.

use super::*;

#[test]
fn the_failure_domains_are_the_racks_observed_and_kept_when_none_could_be_read() {
    let mut stages = provisioned();
    stages.failure_domains = Some(vec!["rack-1".into(), "rack-2".into()]);
    let d = run(&msc(), stages);
    let listed = &d.status.failure_domains;
    let names: Vec<&str> = listed.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["rack-1", "rack-2"]);
    assert!(listed.iter().all(|d| d.control_plane == Some(true)));
    assert_eq!(
        listed[0].attributes.get("partition").map(String::as_str),
        Some(msc().spec.partition.as_str())
    );

    let mut before = msc();
    before.status = Some(d.status.clone());
    let d = run(&before, provisioned());
    assert_eq!(&d.status.failure_domains, listed, "unread: kept");

    let mut emptied = provisioned();
    emptied.failure_domains = Some(vec!["rack-2".into()]);
    let d = run(&before, emptied);
    assert_eq!(
        d.status.failure_domains.len(),
        1,
        "a rack emptied drops out"
    );
}
