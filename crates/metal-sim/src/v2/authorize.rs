//! Who may call a method, as its proto declares (`project_roles`, `visibility`) and as
//! metal-apiserver's authorizer decides for an API token: a project-scoped method on the
//! request's `project` for a token with one of the method's roles in it, or with the method
//! listed for that project in its permissions; a method of visibility SELF only when the token's
//! permissions list it. Refusals carry metal-apiserver's codes and messages.

use super::connect::{Code, ConnectError};
use super::tokens::{ProjectRole, Token};
use serde_json::Value;
use std::collections::BTreeSet;

/// Who may call a method.
#[derive(Clone, Copy, Debug)]
pub enum Access {
    /// Anyone, with a token or without.
    Public,
    /// Tokens listing the method in their permissions (`visibility = VISIBILITY_SELF`).
    SelfOnly,
    /// Tokens with one of these roles in the request's project.
    Project(&'static [ProjectRole]),
}

/// Editors and owners (the methods that change something).
pub const EDITOR: &[ProjectRole] = &[ProjectRole::Owner, ProjectRole::Editor];

/// Viewers, editors and owners (the read methods).
pub const VIEWER: &[ProjectRole] = &[ProjectRole::Owner, ProjectRole::Editor, ProjectRole::Viewer];

/// The subjects on which `token` may call `procedure`.
fn subjects(token: &Token, procedure: &str, access: Access) -> BTreeSet<String> {
    let mut subjects: BTreeSet<String> = token
        .permissions
        .iter()
        .filter(|p| p.methods.iter().any(|m| m == procedure))
        .map(|p| p.subject.clone())
        .collect();
    if let Access::Project(roles) = access {
        let by_role = token.project_roles.iter();
        let allowed = by_role.filter(|(_, role)| roles.contains(role));
        subjects.extend(allowed.map(|(project, _)| project.clone()));
    }
    subjects
}

/// Whether `token` (None: no token) may call `procedure` with `request`.
pub fn authorize(
    token: Option<&Token>,
    procedure: &str,
    access: Access,
    request: &Value,
) -> Result<(), ConnectError> {
    let denied = || {
        ConnectError::new(
            Code::PermissionDenied,
            format!(
                "access to:{procedure:?} is not allowed because it is not part of the token permissions"
            ),
        )
    };
    if matches!(access, Access::Public) {
        return Ok(());
    }
    let Some(token) = token else {
        return Err(denied());
    };
    let subjects = subjects(token, procedure, access);
    let subject = match access {
        Access::Project(_) => request["project"].as_str().unwrap_or_default(),
        _ => "",
    };
    if subjects.contains("*") || subjects.contains(subject) {
        return Ok(());
    }
    if subjects.is_empty() {
        return Err(denied());
    }
    let allowed: Vec<String> = subjects.iter().map(|s| format!("{s:?}")).collect();
    Err(ConnectError::new(
        Code::PermissionDenied,
        format!(
            "access to:{procedure:?} with subject:{subject:?} is not allowed because it is not part of the token permissions, allowed subjects are:[{}]",
            allowed.join(" ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::tokens::MethodPermission;
    use super::*;
    use serde_json::json;

    const A: &str = "00000000-0000-0000-0000-00000000000a";
    const B: &str = "00000000-0000-0000-0000-00000000000b";
    const LIST: &str = "/metalstack.api.v2.MachineService/List";
    const DELETE: &str = "/metalstack.api.v2.MachineService/Delete";

    fn token(role: ProjectRole, permissions: Vec<MethodPermission>) -> Token {
        Token {
            uuid: "t".into(),
            user: "u".into(),
            description: String::new(),
            project_roles: [(A.to_owned(), role)].into(),
            permissions,
            issued_at: jiff::Timestamp::UNIX_EPOCH,
            expires: jiff::Timestamp::UNIX_EPOCH,
        }
    }

    fn message(result: Result<(), ConnectError>) -> String {
        let e = result.expect_err("refused");
        assert_eq!(e.code, Code::PermissionDenied);
        e.message
    }

    #[test]
    fn a_project_role_reaches_its_project_only_and_names_it_when_another_is_asked_for() {
        let viewer = token(ProjectRole::Viewer, Vec::new());
        let own = json!({"project": A});
        assert!(authorize(Some(&viewer), LIST, Access::Project(VIEWER), &own).is_ok());
        let other = json!({"project": B});
        assert_eq!(
            message(authorize(
                Some(&viewer),
                LIST,
                Access::Project(VIEWER),
                &other
            )),
            format!(
                "access to:\"{LIST}\" with subject:\"{B}\" is not allowed because it is not part of the token permissions, allowed subjects are:[\"{A}\"]"
            )
        );
        // A viewer may not delete, in any project.
        assert_eq!(
            message(authorize(
                Some(&viewer),
                DELETE,
                Access::Project(EDITOR),
                &own
            )),
            format!(
                "access to:\"{DELETE}\" is not allowed because it is not part of the token permissions"
            )
        );
        let editor = token(ProjectRole::Editor, Vec::new());
        assert!(authorize(Some(&editor), DELETE, Access::Project(EDITOR), &own).is_ok());
    }

    #[test]
    fn without_a_token_only_public_methods_and_self_methods_need_permissions() {
        let request = json!({});
        assert!(authorize(None, "/p", Access::Public, &request).is_ok());
        let refused = authorize(None, LIST, Access::Project(VIEWER), &json!({"project": A}));
        assert!(message(refused).starts_with("access to:"));
        let refresh = "/metalstack.api.v2.TokenService/Refresh";
        let plain = token(ProjectRole::Owner, Vec::new());
        assert!(authorize(Some(&plain), refresh, Access::SelfOnly, &request).is_err());
        let listed = vec![MethodPermission {
            subject: String::new(),
            methods: vec![refresh.into()],
        }];
        let allowed = token(ProjectRole::Owner, listed);
        assert!(authorize(Some(&allowed), refresh, Access::SelfOnly, &request).is_ok());
    }

    #[test]
    fn a_permission_for_any_subject_reaches_every_project() {
        let any = vec![MethodPermission {
            subject: "*".into(),
            methods: vec![LIST.into()],
        }];
        let t = token(ProjectRole::Viewer, any);
        let other = json!({"project": B});
        assert!(authorize(Some(&t), LIST, Access::Project(VIEWER), &other).is_ok());
    }
}
