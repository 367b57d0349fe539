//! A catalog after a miss: an image metal-api gained since the catalog was read is known at
//! once, though the partitions, sizes and images are shared with the catalogs of other
//! credentials for the same metal-api.

use super::*;

#[tokio::test]
async fn an_image_added_since_the_catalog_was_read_is_known_after_a_miss() {
    let rig = rig().await;
    let catalog = rig.ctx.catalogs.own().clone();
    let read = catalog.get().await.expect("the first catalog");
    let new = "ubuntu-99.04";
    assert!(read.images.iter().all(|i| i.id != new));
    {
        let mut state = rig.sim.sim.state();
        let mut image = state.images.values().next().expect("an image").clone();
        image.id = new.to_owned();
        state.images.insert(new.to_owned(), image);
    }
    // sleep-ok: a catalog read within the last second is not read again on a miss.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let fresh = catalog
        .knowing(|c| c.images.iter().any(|i| i.id == new))
        .await
        .expect("a catalog");
    assert!(
        fresh.images.iter().any(|i| i.id == new),
        "the miss read the images again"
    );
}
