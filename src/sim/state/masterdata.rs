//! Partitions, sizes, images and projects: the master data every allocation is checked against.

use super::*;

impl State {
    pub fn project(&self, id: &str) -> SimResult<&Project> {
        self.projects.get(id).ok_or_else(|| {
            SimError::new(
                404,
                format!("rpc error: code = NotFound desc = project with id:{id} not found"),
            )
        })
    }

    pub fn partition(&self, id: &str) -> SimResult<&Partition> {
        self.partitions
            .get(id)
            .ok_or_else(|| SimError::not_found("partition", id))
    }

    pub fn size(&self, id: &str) -> SimResult<&Size> {
        self.sizes
            .get(id)
            .ok_or_else(|| SimError::not_found("size", id))
    }

    pub fn image(&self, id: &str) -> SimResult<&Image> {
        self.images
            .get(id)
            .ok_or_else(|| SimError::not_found("image", id))
    }

    /// Resolution as allocation and `/latest` do it.
    pub fn image_latest(&self, requested: &str) -> SimResult<&Image> {
        let id = images::resolve(requested, self.images.keys().map(String::as_str))
            .map_err(|e| SimError::not_found("image", &e.to_string()))?;
        self.image(id)
    }

}
