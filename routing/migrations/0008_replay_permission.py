from django.db import migrations

ROLES_WITH_REPLAY = ("operator", "admin")


def grant_replay(apps, schema_editor):
    """Give the roles' groups that exist already the new permission, as role_groups_ensure would
    (permissions are otherwise created after the migrations, and groups only on demand)."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    groups = list(Group.objects.filter(name__in=ROLES_WITH_REPLAY))
    if not groups:
        return
    content_type, _ = ContentType.objects.get_or_create(app_label="routing", model="routerecord")
    permission, _ = Permission.objects.get_or_create(
        content_type=content_type, codename="replay_event", defaults={"name": "Can replay a routed Event"}
    )
    for group in groups:
        group.permissions.add(permission)


class Migration(migrations.Migration):
    dependencies = [
        ("routing", "0007_receivers"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="routerecord",
            options={
                "ordering": ["-event"],
                "permissions": [
                    ("skip_event", "Can skip an unrouted Event"),
                    ("reroute_event", "Can reroute an Event"),
                    ("replay_event", "Can replay a routed Event"),
                    ("view_event", "Can read Events, their routes and Work"),
                    ("accept_event", "Can accept Events"),
                ],
            },
        ),
        migrations.RunPython(grant_replay, migrations.RunPython.noop),
    ]
