-- IF NOT EXISTS: the migrator creates this schema first to hold its own journal table.
CREATE SCHEMA IF NOT EXISTS "svc_engine";
--> statement-breakpoint
CREATE TABLE "svc_engine"."key_usage" (
	"engine_id" text NOT NULL,
	"alias" text NOT NULL,
	"version" bigint NOT NULL,
	"encryptions" bigint DEFAULT 0 NOT NULL,
	"decryptions" bigint DEFAULT 0 NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "key_usage_engine_id_alias_version_pk" PRIMARY KEY("engine_id","alias","version")
);
--> statement-breakpoint
CREATE TABLE "svc_engine"."keys" (
	"engine_id" text NOT NULL,
	"alias" text NOT NULL,
	"version" bigint NOT NULL,
	"algorithm" text NOT NULL,
	"status" text NOT NULL,
	"wrapped_material" "bytea" NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "keys_engine_id_alias_version_pk" PRIMARY KEY("engine_id","alias","version")
);
--> statement-breakpoint
CREATE TABLE "svc_engine"."policies" (
	"engine_id" text NOT NULL,
	"policy_code" text NOT NULL,
	"policy_name" text NOT NULL,
	"policy_version" bigint NOT NULL,
	"algorithm" text NOT NULL,
	"key_alias" text NOT NULL,
	"status" text NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "policies_engine_id_policy_code_pk" PRIMARY KEY("engine_id","policy_code")
);
--> statement-breakpoint
CREATE TABLE "svc_engine"."runtime_identity" (
	"engine_id" text PRIMARY KEY NOT NULL,
	"hub_url" text NOT NULL,
	"tenant_id" text NOT NULL,
	"registered_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "svc_engine"."runtime_state" (
	"engine_id" text PRIMARY KEY NOT NULL,
	"runtime_version" text DEFAULT '' NOT NULL,
	"master_key_check" text NOT NULL,
	"last_heartbeat_at" timestamp with time zone,
	"last_sync_at" timestamp with time zone,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
