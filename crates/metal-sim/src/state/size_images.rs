//! Size image constraints: which images machines of a size take, as metal-api checks them at
//! allocation, in `POST /v1/size-image-constraint/try` and in API v2's
//! `SizeImageConstraintService/Try`; read by anyone through `GET /v1/size-image-constraint`.

use super::*;
use metal_api::size_images::{SizeImageConstraint, SizeImageConstraintBase, VersionConstraint};

impl State {
    /// Why machines of size `size` may not take the image `requested` resolves to, in metal-api's
    /// words; None when they may. An unknown size or image, or one of an OS the size does not
    /// restrict, is not refused here.
    pub fn size_image_refusal(&self, size: &str, requested: &str) -> Option<String> {
        let constraint = self.size_image_constraints.get(size)?;
        let image = self.image_latest(requested).ok()?;
        constraint.refusal(&image.id)
    }

    /// `GET /v1/size-image-constraint/{id}`: the constraints of the size `id`.
    pub fn size_image_constraint(&self, id: &str) -> SimResult<&SizeImageConstraint> {
        self.size_image_constraints
            .get(id)
            .ok_or_else(|| SimError::not_found("sizeimageconstraint", id))
    }

    /// `POST /v1/size-image-constraint/try {size, image}`: both must be given (400) and known
    /// (404, the image in full or as `<os>-<major>.<minor>`), and the size's constraints must
    /// let its machines take the image (422).
    pub fn size_image_try(&self, size: &str, image: &str) -> SimResult<()> {
        if size.is_empty() || image.is_empty() {
            return Err(SimError::bad_request("size and image must be given"));
        }
        self.size(size)?;
        self.image_latest(image)?;
        match self.size_image_refusal(size, image) {
            Some(refusal) => Err(SimError::unprocessable(refusal)),
            None => Ok(()),
        }
    }

    pub(super) fn load_size_image_constraints(&mut self, inv: &Inventory) -> Result<(), String> {
        for c in &inv.sizeimageconstraints {
            if !self.sizes.contains_key(&c.id) {
                return Err(format!("size image constraint of unknown size {}", c.id));
            }
            for text in c.images.values() {
                VersionConstraint::parse(text)
                    .map_err(|e| format!("size image constraint {}: {e}", c.id))?;
            }
            let constraint = SizeImageConstraint {
                id: c.id.clone(),
                constraints: SizeImageConstraintBase {
                    images: c.images.clone(),
                },
                ..Default::default()
            };
            self.size_image_constraints.insert(c.id.clone(), constraint);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seed 000's state, whose size takes no Ubuntu before 22.04.
    fn constrained() -> State {
        let mut inventory = Inventory::seed000();
        inventory
            .sizeimageconstraints
            .push(crate::inventory::SizeImageConstraintSpec {
                id: "v1-small-x86".into(),
                images: [("ubuntu".to_owned(), ">= 22.04".to_owned())].into(),
            });
        State::from_inventory(&inventory).expect("a state")
    }

    #[test]
    fn a_size_refuses_only_resolved_images_of_a_restricted_os_outside_its_range() {
        let state = constrained();
        assert_eq!(
            state
                .size_image_refusal("v1-small-x86", "ubuntu-20.04")
                .as_deref(),
            Some(
                "given size:v1-small-x86 with image:ubuntu-20.04.20201126 does violate image constraint:ubuntu >=22.04"
            )
        );
        assert_eq!(
            state.size_image_refusal("v1-small-x86", "ubuntu-cloud-init-20.04"),
            None
        );
        assert_eq!(state.size_image_refusal("v1-small-x86", "nope-1.0"), None);
        assert_eq!(state.size_image_refusal("other", "ubuntu-20.04"), None);
    }

    #[test]
    fn allocation_through_v1_refuses_a_violation_as_unprocessable() {
        let mut state = constrained();
        let request = MachineAllocateRequest {
            projectid: "00000000-0000-0000-0000-000000000000".into(),
            partitionid: "vagrant".into(),
            sizeid: "v1-small-x86".into(),
            imageid: "ubuntu-20.04".into(),
            networks: Some(vec![AllocationNetwork {
                networkid: "internet-vagrant-lab".into(),
                autoacquire: None,
            }]),
            ..Default::default()
        };
        let refused = state.machine_allocate(&request, None, ROLE_MACHINE, "test");
        let refused = refused.expect_err("a violation");
        assert_eq!(refused.status, 422);
        assert!(
            refused
                .message
                .contains("does violate image constraint:ubuntu >=22.04")
        );
    }
}
