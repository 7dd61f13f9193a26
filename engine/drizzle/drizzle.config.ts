// drizzle-kit configuration: generates the SQL migrations applied at start by the engine's store
// (both drivers). Run from the engine workspace: `npm run db:generate -w engine`.
import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: './src/store/schema.ts',
  out: './drizzle/migrations',
  migrations: { schema: 'svc_engine', table: '__drizzle_migrations' },
});
