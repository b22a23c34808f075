from django.db import migrations


def grant_pause(apps, schema_editor):
    """Give the operator and admin roles' groups, if they exist already, the permission to pause
    and resume (routing.access.roles gives it to new groups; permissions are otherwise created
    after the migrations, and groups only on demand)."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    groups = list(Group.objects.filter(name__in=("operator", "admin")))
    if not groups:
        return
    content_type, _ = ContentType.objects.get_or_create(app_label="worklife", model="pause")
    permission, _ = Permission.objects.get_or_create(
        content_type=content_type,
        codename="pause_work",
        defaults={"name": "Can pause and resume scopes, bindings, routes and schedules"},
    )
    for group in groups:
        group.permissions.add(permission)


class Migration(migrations.Migration):
    dependencies = [
        ("worklife", "0011_pauses"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(grant_pause, migrations.RunPython.noop)]
