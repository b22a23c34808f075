from django.db import migrations

# django-axes' permissions the admin role needs to unlock a locked sign-in in the admin
# (routing.access.roles.AXES_UNLOCK): by model, its verbose name and the verbs.
AXES_UNLOCK = {
    "accessattempt": ("access attempt", ("view", "delete")),
    "accesslog": ("access log", ("view",)),
    "accessfailurelog": ("access failure", ("view",)),
}


def grant_unlock(apps, schema_editor):
    """Give the admin role's group, if it exists already, the permissions role_groups_ensure now
    gives it (permissions are otherwise created after the migrations, and groups only on demand)."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    group = Group.objects.filter(name="admin").first()
    if group is None:
        return
    for model, (verbose_name, verbs) in AXES_UNLOCK.items():
        content_type, _ = ContentType.objects.get_or_create(app_label="axes", model=model)
        for verb in verbs:
            permission, _ = Permission.objects.get_or_create(
                content_type=content_type,
                codename=f"{verb}_{model}",
                defaults={"name": f"Can {verb} {verbose_name}"},
            )
            group.permissions.add(permission)


class Migration(migrations.Migration):
    dependencies = [
        ("routing", "0009_impact_runs"),
        ("axes", "0010_accessattemptexpiration"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(grant_unlock, migrations.RunPython.noop)]
