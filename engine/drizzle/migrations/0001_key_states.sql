CREATE TABLE "svc_engine"."key_aliases" (
	"engine_id" text NOT NULL,
	"alias" text NOT NULL,
	"min_decryption_version" bigint NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "key_aliases_engine_id_alias_pk" PRIMARY KEY("engine_id","alias")
);
--> statement-breakpoint
ALTER TABLE "svc_engine"."keys" ADD COLUMN "status_since" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "svc_engine"."runtime_state" ADD COLUMN "snapshot_digest" text;--> statement-breakpoint
ALTER TABLE "svc_engine"."runtime_state" ADD COLUMN "policy_count" bigint;--> statement-breakpoint
ALTER TABLE "svc_engine"."runtime_state" ADD COLUMN "key_count" bigint;